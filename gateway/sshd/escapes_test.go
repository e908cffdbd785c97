package sshd

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/termtext"
)

// hostile is box text a terminal would act on: OSC 52 (write the
// operator's clipboard, "pwned" in base64), OSC 2 (the window title),
// CSI (up a line, erase it, fake a result), a UTF-8 encoded 8-bit CSI and
// a bidi override.
const hostile = "\x1b]52;c;cHduZWQ=\a\x1b]2;sbx-owned-title\x1b\\\x1b[1A\x1b[2Kfake: all tests passed \u009b31m\u202eevil"

// hostileShown is how the start of hostile reads once sanitized.
const hostileShown = `\u001b]52;c;cHduZWQ=\u0007\u001b]2;sbx-owned-title\u001b\`

// terminalSafe fails unless out is what the terminal sanitizer would
// print: no ESC, nothing else a terminal acts on, valid UTF-8.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsRune(out, 0x1b) || termtext.String(out) != out || !utf8.ValidString(out) {
		t.Errorf("%s: box text reaches the terminal unsanitized:\n%q", what, out)
	}
}

// TestRegressionSSHErrorEscapes: an error quoting its input (here pflag's
// "unknown flag: --…", which quotes raw) is sanitized like any output:
// every command's stderr passes the one writer. No box needed.
func TestRegressionSSHErrorEscapes(t *testing.T) {
	f := start(t, 100)
	c, err := f.dial(gossh.PublicKeys(f.op))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stdout, stderr, err := run(t, c, "whoami --\x1b]2;sbx-owned-title\a\u202e")
	if err == nil || !strings.Contains(stderr, `unknown flag: --\u001b]2;sbx-owned-title\u0007\u202e`) {
		t.Fatalf("whoami with a hostile flag: %v\nstdout %q\nstderr %q", err, stdout, stderr)
	}
	terminalSafe(t, "stderr", stderr)
	// Harmless output passes byte for byte.
	if stdout, _, err := run(t, c, "whoami"); err != nil || !strings.HasPrefix(stdout, "bob (operator)\nkey SHA256:") {
		t.Fatalf("whoami: %v %q", err, stdout)
	}
}

// TestRegressionSSHStatusEscapes: a box's question, log and task holding
// escape sequences reach the operator neutralised — in status, ls, logs,
// their --json forms (still JSON, the exact text inside) and the fleet TUI
// in a real terminal (tmux: no clipboard buffer, no title set) — while
// exec and attach still pass the box's bytes raw.
func TestRegressionSSHStatusEscapes(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	b, err := g.fleet.Delegate(ctx, g.actors["alice"], fleet.DelegateRequest{Agent: "script",
		Task: "!say " + hostile + "\n!ask " + hostile})
	if err != nil {
		t.Fatal(err)
	}
	name := b.Name
	b = g.waitState("alice", name, fleet.Waiting)
	if b.Question.String() != hostile {
		t.Fatalf("the core hands the front %q, want the box's raw question %q: this test no longer shows the hole", b.Question.String(), hostile)
	}

	for _, cmd := range [][]string{{"status", name}, {"ls"}, {"logs", name}, {"-tt", "status", name}} {
		r := g.run("alice", "", cmd...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", cmd, r)
		}
		terminalSafe(t, strings.Join(cmd, " "), r.stdout+r.stderr)
	}
	if out := g.must("alice", "status", name); !strings.Contains(out, "question:\n"+hostileShown) {
		t.Errorf("status does not show the question, made visible:\n%s", out)
	}
	if out := g.must("alice", "logs", name); !strings.Contains(out, "question: "+hostileShown) {
		t.Errorf("logs does not show the question, made visible:\n%s", out)
	}
	// JSON stays JSON and carries the exact text.
	out := g.must("alice", "status", "--json", name)
	terminalSafe(t, "status --json", out)
	var st struct{ Question, Task string }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Question != hostile {
		t.Fatalf("status --json: %v, question %q\n%s", err, st.Question, out)
	}
	out = g.must("alice", "ls", "--json")
	terminalSafe(t, "ls --json", out)
	var boxes []struct{ Question string }
	if err := json.Unmarshal([]byte(out), &boxes); err != nil || len(boxes) != 1 || boxes[0].Question != hostile {
		t.Fatalf("ls --json: %v %+v", err, boxes)
	}

	// The raw modes pass the box's bytes through untouched.
	if r := g.run("alice", "", "exec", name, "--", "printf", `'\033]52;c;aGk=\a'`); r.code != 0 || r.stdout != "\x1b]52;c;aGk=\a" {
		t.Fatalf("exec is not raw: %+v", r)
	}
	if r := g.run("alice", "", "-tt", "attach", name, "--", "printf", `'\033]2;raw\a'`); r.code != 0 || !strings.Contains(r.stdout, "\x1b]2;raw\a") {
		t.Fatalf("attach is not raw: %+v", r)
	}

	// The TUI in a real terminal: the box view shows the task, the
	// question banner and the log, with what the box sent made visible.
	// tmux would take an OSC 52 as a paste buffer (set-clipboard on) and
	// an OSC 2 as the pane's title; Bubble Tea's renderer drops some
	// sequences on its own, which hides them, and passes bidi overrides.
	ssh := "ssh " + strings.Join(g.sshOpts("alice"), " ") + " -p " + g.port + " -t 127.0.0.1"
	tm := newTmux(t, 200, 30, ssh)
	if out, err := tm.cmd("set-option", "-s", "set-clipboard", "on"); err != nil {
		t.Fatalf("tmux: %v %s", err, out)
	}
	tm.wait(regexp.QuoteMeta(name), time.Minute)
	tm.keys("Enter")
	tm.wait(`\(a to answer\)`, 10*time.Second) // the question banner
	tm.wait(`ask-gate denied`, 10*time.Second) // the log, past the question
	time.Sleep(500 * time.Millisecond)         // let the terminal take anything left in flight
	if title, _ := tm.cmd("display-message", "-p", "-t", "t", "#{pane_title}"); strings.Contains(title, "sbx-owned") {
		t.Errorf("the box set the terminal's title: %q", title)
	}
	if bufs, _ := tm.cmd("list-buffers"); strings.TrimSpace(bufs) != "" {
		t.Errorf("the box wrote the clipboard (tmux buffers: %q)", bufs)
	}
	screen := tm.screen()
	if strings.ContainsRune(screen, 0x202e) {
		t.Errorf("a bidi override reached the terminal:\n%s", screen)
	}
	for _, want := range []string{
		"? " + hostileShown,           // the banner
		"task: !say " + hostileShown,  // the task
		"\nquestion: " + hostileShown, // the log
		`\u009b31m\u202eevil`,         // C1 and bidi, visible
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("the TUI does not show %q:\n%s", want, screen)
		}
	}
	tm.keys("q", "q")
}

// TestRegressionSSHDiffEscapes: a file the box committed with escape
// sequences, C1 controls, bidi overrides and bytes that are not UTF-8
// shows in diff made visible; diff --json stays JSON with the text inside;
// exec still reads the file byte for byte.
func TestRegressionSSHDiffEscapes(t *testing.T) {
	g := newGateway(t)
	if r := g.run("alice", g.token+"\n", "account", "add", "work", "--probe", "acme/widget"); r.code != 0 {
		t.Fatalf("account add: %+v", r)
	}
	g.must("alice", "account", "default", "work")
	name := strings.TrimSpace(g.must("alice", "new", "--repo", "acme/widget", "--agent", "script", `"!say ready"`))
	b := g.waitState("alice", name, fleet.Done)
	if len(b.Repos) != 1 {
		t.Fatalf("box %s has repos %+v", name, b.Repos)
	}
	dir := "/workspace/" + b.Repos[0].Dir
	const file = "line one\n" + hostile + "\nraw 8-bit csi \x9b31m, lone cr\rover it\nend\r\n"
	commit := "'cd " + dir + " && cat > evil.txt && git add -A && git -c user.name=box -c user.email=box@example.com commit -qm evil'"
	if r := g.run("alice", file, "exec", name, "--", "sh", "-c", commit); r.code != 0 {
		t.Fatalf("commit in the box: %+v", r)
	}

	r := g.run("alice", "", "diff", name)
	if r.code != 0 || !strings.Contains(r.stdout, "+++ b/") || !strings.Contains(r.stdout, "\n+"+hostileShown) ||
		!strings.Contains(r.stdout, `raw 8-bit csi \x9b31m, lone cr\u000dover it`) || !strings.Contains(r.stdout, "\n+end\r\n") {
		t.Fatalf("diff:\n%+v", r)
	}
	terminalSafe(t, "diff", r.stdout+r.stderr)
	for _, cmd := range [][]string{{"diff", "--stat", name}, {"-tt", "diff", name}} {
		r := g.run("alice", "", cmd...)
		if r.code != 0 {
			t.Fatalf("%v: %+v", cmd, r)
		}
		terminalSafe(t, strings.Join(cmd, " "), r.stdout+r.stderr)
	}
	out := g.must("alice", "diff", "--json", name)
	terminalSafe(t, "diff --json", out)
	var d struct{ Patch string }
	if err := json.Unmarshal([]byte(out), &d); err != nil || !strings.Contains(d.Patch, "\n+"+hostile+"\n") {
		t.Fatalf("diff --json: %v\n%s", err, out)
	}

	// exec is raw: the box's bytes, all of them.
	if r := g.run("alice", "", "exec", name, "--", "cat", dir+"/evil.txt"); r.code != 0 || r.stdout != file {
		t.Fatalf("exec cat: %q, want %q (%+v)", r.stdout, file, r)
	}
	if r := g.run("alice", "", "exec", name, "--", "printf", `'\033]52;c;aGk=\a'`); r.code != 0 || r.stdout != "\x1b]52;c;aGk=\a" {
		t.Fatalf("exec is not raw: %+v", r)
	}
}
