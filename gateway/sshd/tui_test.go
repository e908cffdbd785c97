package sshd

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// tmux drives the real OpenSSH client in a real terminal emulator.
type tmux struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T, cols, rows int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("needs tmux")
	}
	tm := &tmux{t: t, sock: fmt.Sprintf("sbx-sshd-%d", time.Now().UnixNano())}
	if out, err := tm.cmd("new-session", "-d", "-s", "t", "-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows), command); err != nil {
		t.Fatalf("tmux: %v %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm.cmd("kill-server") })
	return tm
}

func (tm *tmux) cmd(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-L", tm.sock}, args...)...).CombinedOutput()
	return string(out), err
}

func (tm *tmux) screen() string {
	out, _ := tm.cmd("capture-pane", "-p", "-t", "t")
	return out
}

func (tm *tmux) keys(keys ...string) {
	tm.t.Helper()
	for _, k := range keys {
		if out, err := tm.cmd("send-keys", "-t", "t", k); err != nil {
			tm.t.Fatalf("send-keys %s: %v %s", k, err, out)
		}
		time.Sleep(150 * time.Millisecond) // a lone Esc must not merge with the next key
	}
}

// wait polls the screen until re matches, and says how long it took.
func (tm *tmux) wait(re string, limit time.Duration) time.Duration {
	tm.t.Helper()
	rx := regexp.MustCompile(re)
	start := time.Now()
	for {
		if rx.MatchString(tm.screen()) {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			tm.t.Fatalf("no %q on the screen within %v:\n%s", re, limit, tm.screen())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTUI drives the fleet TUI through the real OpenSSH client in tmux:
// the table shows a new box within a second of its creation and its state
// change on sleep; the box view tails the log and shows the question with
// an answer input; resizes to 80×24 stay usable; q quits.
func TestTUI(t *testing.T) {
	g := newGateway(t)
	ssh := "ssh " + strings.Join(g.sshOpts("alice"), " ") + " -p " + g.port + " -t 127.0.0.1"
	tm := newTmux(t, 100, 30, ssh)
	tm.wait(`sbx fleet — alice \(operator\) — 0 box`, time.Minute)
	tm.wait(`no boxes yet`, time.Second)

	// A new box through the delegate form: the table shows it within a
	// second of the core's creation event.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := g.fleet.Events(ctx, g.actors["root"])
	tm.keys("n")
	tm.wait(`Delegate a task to a new box`, 5*time.Second)
	tm.keys("which word?", "Enter", "Enter", "Enter", "script", "Enter", "Enter")
	tm.wait(`> Keep: +no`, 5*time.Second)
	tm.keys("Enter") // submit from the last field
	// The status line follows the core's steps while the box boots.
	tm.wait(`booting \((small|stock) kernel\)…`, 30*time.Second)
	var name string
	for ev := range events {
		if ev.Kind == fleet.EventState {
			name = ev.Box
			break
		}
	}
	if d := tm.wait(regexp.QuoteMeta(name), 5*time.Second); d > time.Second {
		t.Errorf("the table showed box %s %v after its creation event (want ≤ 1 s)", name, d)
	}
	if b, err := g.fleet.Get(ctx, g.actors["alice"], name); err != nil || b.Agent != "script" || b.Task.String() != "which word?" {
		t.Fatalf("the form delegated %+v (%v)", b, err)
	}
	// The default script asks a question: the table flags it, the box view
	// shows the banner and takes the answer.
	tm.wait(`waiting +script .*\?`, 2*time.Minute)
	tm.keys("Enter")
	tm.wait(`box `+regexp.QuoteMeta(name)+` · waiting`, 5*time.Second)
	tm.wait(`\? Which word should I add to README.md\?`, 5*time.Second)
	tm.wait(`script agent: starting`, 10*time.Second) // the live log tail
	tm.keys("a")
	tm.wait(`answer to `+regexp.QuoteMeta(name)+`:`, 5*time.Second)
	tm.waitCursor(len("answer to "+name+": "), 30-2, 5*time.Second) // the terminal's cursor, where the answer goes
	tm.keys("banana", "Enter")
	tm.wait(`done`, 2*time.Minute)
	tm.wait(`answer received: banana`, 30*time.Second)

	// 80×24 still shows the header, the box and the help bar.
	if out, err := tm.cmd("resize-window", "-t", "t", "-x", "80", "-y", "24"); err != nil {
		t.Fatalf("resize: %v %s", err, out)
	}
	tm.keys("Escape")
	tm.wait(`(?s)sbx fleet.*`+regexp.QuoteMeta(name)+`.*↑↓`, 5*time.Second)
	for i, line := range strings.Split(strings.TrimRight(tm.screen(), "\n"), "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("line %d is %d cells wide at 80×24: %q", i, n, line)
		}
	}

	// Sleep through the TUI, confirmed: the table shows the new state.
	tm.keys("z")
	tm.wait(`sleep `+regexp.QuoteMeta(name)+`\? y/N`, 5*time.Second)
	tm.keys("y")
	tm.wait(regexp.QuoteMeta(name)+` +alice +sleeping`, time.Minute)

	// Filter hides what does not match.
	tm.keys("/", "zzz", "Enter")
	tm.wait(`no box matches the filter`, 5*time.Second)
	tm.keys("Escape")
	tm.wait(regexp.QuoteMeta(name), 5*time.Second)

	// A refused delegation reopens the form with what was typed and the
	// core's one-line reason.
	tm.keys("n", "x", "Enter", "Enter", "Enter", "gpt", "Enter", "Enter", "Enter")
	tm.wait(`(?s)Agent: gpt.*error: `, 10*time.Second)
	tm.keys("Escape")
	tm.wait(regexp.QuoteMeta(name), 5*time.Second)

	tm.keys("q")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, _ := tm.cmd("list-sessions"); !strings.Contains(out, "t:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("q did not end the session:\n%s", tm.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTUIFifty: fifty TUI sessions at once, each a subscriber of the core's
// one event fan-out; a new box reaches every screen.
func TestTUIFifty(t *testing.T) {
	const n = 50
	g := newGatewayWith(t, func(o *Options) { o.MaxSessionsPerUser = n + 2 })
	c := g.dialX(t, "alice")
	screens := make([]*syncBuf, n)
	for i := range screens {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.RequestPty("xterm-256color", 24, 80, nil); err != nil {
			t.Fatal(err)
		}
		screens[i] = &syncBuf{}
		sess.Stdout = screens[i]
		if _, err := sess.StdinPipe(); err != nil { // held open: the TUI waits for keys
			t.Fatal(err)
		}
		if err := sess.Shell(); err != nil {
			t.Fatal(err)
		}
	}
	waitAll := func(what string, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			missing := 0
			for _, s := range screens {
				if !strings.Contains(s.String(), what) {
					missing++
				}
			}
			if missing == 0 {
				return time.Since(start)
			}
			if time.Since(start) > limit {
				t.Fatalf("%d of %d screens never showed %q", missing, n, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitAll("no boxes yet", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := g.fleet.Events(ctx, g.actors["alice"])
	go func() {
		_, _ = g.fleet.Delegate(ctx, g.actors["alice"], fleet.DelegateRequest{Task: "!say fifty", Agent: "script"})
	}()
	var name string
	for ev := range events {
		if ev.Kind == fleet.EventState {
			name = ev.Box
			break
		}
	}
	d := waitAll(name, 30*time.Second)
	t.Logf("all %d screens showed the new box %v after its event", n, d)
	if d > 5*time.Second {
		t.Errorf("the last of %d screens took %v to show a new box", n, d)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
