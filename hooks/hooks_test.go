package hooks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/hooks/internal/shelltest"
)

// TestMain doubles as the sbx binary: with SBX_HOOKS_TEST_EXEC=1 it runs a
// root command wired exactly like main.go (errors end in exit 1), so the exec
// tests below go through the real process boundary, stdin and exit status.
func TestMain(m *testing.M) {
	if os.Getenv("SBX_HOOKS_TEST_EXEC") == "1" {
		root := &cobra.Command{Use: "sbx", SilenceUsage: true, SilenceErrors: true}
		root.AddCommand(NewCommand())
		if err := root.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, "sbx:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// payload builds a PreToolUse input.
func payload(tool string, input map[string]any) []byte {
	b, err := json.Marshal(map[string]any{
		"session_id":      "s-1",
		"transcript_path": "/root/.claude/projects/x/s-1.jsonl",
		"cwd":             "/workspace/repo",
		"hook_event_name": "PreToolUse",
		"tool_name":       tool,
		"tool_input":      input,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// withCwd replaces the payload's cwd.
func withCwd(p []byte, cwd string) []byte {
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		panic(err)
	}
	m["cwd"] = cwd
	b, _ := json.Marshal(m)
	return b
}

func bash(cmd string) []byte {
	return payload("Bash", map[string]any{"command": cmd, "description": "x"})
}

type env struct {
	workspace string
	log       string
}

func newEnv(t *testing.T) env {
	t.Helper()
	ws := t.TempDir()
	return env{workspace: ws, log: filepath.Join(ws, LogFile)}
}

func (e env) getenv(k string) string {
	switch k {
	case "SBX_WORKSPACE":
		return e.workspace
	}
	return ""
}

func (e env) question(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.workspace, QuestionFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run calls Main in process, as the command does.
func (e env) run(hook string, stdin []byte) (int, string) {
	var stderr bytes.Buffer
	code := Main([]string{hook}, bytes.NewReader(stdin), &stderr, e.getenv)
	return code, stderr.String()
}

func (e env) entries(t *testing.T) []Entry {
	t.Helper()
	f, err := os.Open(e.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var en Entry
		if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, en)
	}
	return out
}

func TestAskGate(t *testing.T) {
	e := newEnv(t)
	q := filepath.Join(e.workspace, QuestionFile)
	write := func(p string) []byte { return payload("Write", map[string]any{"file_path": p, "content": "?"}) }
	edit := func(p string) []byte {
		return payload("Edit", map[string]any{"file_path": p, "old_string": "API", "new_string": "HTTP API"})
	}
	multi := func(p string) []byte {
		return payload("MultiEdit", map[string]any{"file_path": p, "edits": []any{
			map[string]any{"old_string": "version", "new_string": "major version"}}})
	}
	read := payload("Read", map[string]any{"file_path": q})
	other := filepath.Join(e.workspace, "main.go")
	everything := [][]byte{bash("ls"), bash("rm -rf /"), read, write(other), edit(other), write(q),
		payload("WebFetch", map[string]any{"url": "http://x"}), payload("mcp__x__y", map[string]any{})}

	// No question file: everything passes (other hooks still apply).
	for _, in := range everything {
		if code, msg := e.run("ask-gate", in); code != ExitAllow {
			t.Fatalf("no question: denied %s: %s", in, msg)
		}
	}
	// An empty question file is no question.
	e.question(t, "")
	if code, msg := e.run("ask-gate", bash("ls")); code != ExitAllow {
		t.Fatalf("empty question: denied: %s", msg)
	}

	e.question(t, "Which API version should I use?\n")
	for _, tc := range []struct {
		name string
		in   []byte
		want int
	}{
		{"bash", bash("ls"), ExitDeny},
		{"read question", read, ExitDeny},
		{"write other file", write(other), ExitDeny},
		{"edit other file", edit(other), ExitDeny},
		{"web", payload("WebFetch", map[string]any{"url": "http://x"}), ExitDeny},
		{"mcp", payload("mcp__x__y", map[string]any{}), ExitDeny},
		{"task", payload("Task", map[string]any{"prompt": "x"}), ExitDeny},
		{"write question", write(q), ExitAllow},
		{"edit question", edit(q), ExitAllow},
		{"multiedit question", multi(q), ExitAllow},
		{"reword question", payload("Edit", map[string]any{"file_path": q, "old_string": "API", "new_string": "API (v1 or v2)"}), ExitAllow},
		{"clear question by Write", payload("Write", map[string]any{"file_path": q, "content": ""}), ExitDeny},
		{"clear question by Edit", payload("Edit", map[string]any{"file_path": q, "old_string": "Which API version should I use?\n", "new_string": ""}), ExitDeny},
		{"edit with an empty old_string changes nothing", payload("Edit", map[string]any{"file_path": q, "old_string": "", "new_string": "", "replace_all": true}), ExitAllow},
		{"clear question by MultiEdit", payload("MultiEdit", map[string]any{"file_path": q, "edits": []any{
			map[string]any{"old_string": "Which API version", "new_string": ""},
			map[string]any{"old_string": " should I use?\n", "new_string": ""},
		}}), ExitDeny},
		{"write question without content", payload("Write", map[string]any{"file_path": q}), ExitDeny},
		{"edit question replace_all not bool", payload("Edit", map[string]any{"file_path": q, "old_string": "a", "new_string": "b", "replace_all": "yes"}), ExitDeny},
		{"write question via ..", write(filepath.Join(e.workspace, "repo", "..", QuestionFile)), ExitAllow},
		{"write question relative to cwd", withCwd(write("../"+QuestionFile), filepath.Join(e.workspace, "repo")), ExitAllow},
		{"write relative, cwd relative", withCwd(write("../"+QuestionFile), "repo"), ExitDeny},
		{"write other relative to cwd", withCwd(write("main.go"), e.workspace), ExitDeny},
		{"write look-alike", write(q + ".bak"), ExitDeny},
		{"write question no path", payload("Write", map[string]any{"content": "?"}), ExitDeny},
		{"write question path null", payload("Write", map[string]any{"file_path": nil}), ExitDeny},
		{"write question path smuggled", payload("Write", map[string]any{"file_path": other, "File_path": q}), ExitDeny},
		{"malformed", []byte(`{"tool_name":`), ExitDeny},
	} {
		code, msg := e.run("ask-gate", tc.in)
		if code != tc.want {
			t.Errorf("%s: exit %d (%s), want %d", tc.name, code, msg, tc.want)
		}
		if code == ExitDeny && (msg == "" || strings.Count(msg, "\n") != 1) {
			t.Errorf("%s: deny reason must be one line on stderr, got %q", tc.name, msg)
		}
	}
	if _, msg := e.run("ask-gate", bash("ls")); !strings.Contains(msg, "operator") {
		t.Errorf("deny reason does not say it waits for the operator: %q", msg)
	}

	// Answered: the core removes or empties the file, and calls flow again.
	e.question(t, "")
	if code, msg := e.run("ask-gate", bash("ls")); code != ExitAllow {
		t.Fatalf("after the answer: denied: %s", msg)
	}
	// A question path that is a directory is not "absent": fail closed.
	os.Remove(q)
	os.Mkdir(q, 0o755)
	if code, _ := e.run("ask-gate", bash("ls")); code != ExitDeny {
		t.Fatal("question path is a directory: allowed")
	}
}

func TestReadOnlyTools(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		in   []byte
		want int
	}{
		{"Read", payload("Read", map[string]any{"file_path": "/workspace/a"}), ExitAllow},
		{"Glob", payload("Glob", map[string]any{"pattern": "**/*.go"}), ExitAllow},
		{"Grep", payload("Grep", map[string]any{"pattern": "TODO"}), ExitAllow},
		{"LS", payload("LS", map[string]any{"path": "/workspace"}), ExitAllow},
		{"Write", payload("Write", map[string]any{"file_path": "/workspace/a", "content": "x"}), ExitDeny},
		{"Edit", payload("Edit", map[string]any{"file_path": "/workspace/a", "old_string": "a", "new_string": "b"}), ExitDeny},
		{"MultiEdit", payload("MultiEdit", map[string]any{"file_path": "/workspace/a", "edits": []any{}}), ExitDeny},
		{"NotebookEdit", payload("NotebookEdit", map[string]any{"notebook_path": "/workspace/a.ipynb"}), ExitDeny},
		{"WebFetch", payload("WebFetch", map[string]any{"url": "https://example.com", "prompt": "x"}), ExitDeny},
		{"WebSearch", payload("WebSearch", map[string]any{"query": "x"}), ExitDeny},
		{"Task", payload("Task", map[string]any{"prompt": "x"}), ExitDeny},
		{"TodoWrite", payload("TodoWrite", map[string]any{"todos": []any{}}), ExitDeny},
		{"KillShell", payload("KillShell", map[string]any{"shell_id": "1"}), ExitDeny},
		{"mcp", payload("mcp__github__create_issue", map[string]any{}), ExitDeny},
		{"unknown tool", payload("Frobnicate", map[string]any{}), ExitDeny},
		{"bash allowed", bash("git log --oneline | head"), ExitAllow},
		{"bash denied", bash("ls; rm -rf x"), ExitDeny},
		{"bash no command", payload("Bash", map[string]any{"description": "x"}), ExitDeny},
		{"bash null command", payload("Bash", map[string]any{"command": nil}), ExitDeny},
		{"bash number command", payload("Bash", map[string]any{"command": 7}), ExitDeny},
		{"bash array command", payload("Bash", map[string]any{"command": []string{"ls"}}), ExitDeny},
		// encoding/json would match "Command" to a command field; Claude
		// Code runs "command".
		{"bash smuggled key", []byte(`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf x","Command":"ls"}}`), ExitDeny},
		{"bash duplicate key, last wins as in JS", []byte(`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls","command":"rm x"}}`), ExitDeny},
	} {
		code, msg := e.run("read-only", tc.in)
		if code != tc.want {
			t.Errorf("%s: exit %d (%s), want %d", tc.name, code, msg, tc.want)
		}
	}
}

// TestReadOnlyTablesThroughMain runs the whole shell table through the full
// JSON path in process.
func TestReadOnlyTablesThroughMain(t *testing.T) {
	e := newEnv(t)
	for _, c := range shelltest.ReadOnlyAllowed {
		if code, msg := e.run("read-only", bash(c)); code != ExitAllow {
			t.Errorf("denied %q: %s", c, msg)
		}
	}
	for _, c := range shelltest.ReadOnlyDenied {
		if code, _ := e.run("read-only", bash(c)); code != ExitDeny {
			t.Errorf("allowed %q", c)
		}
	}
	// Every decision above is one log line, denials with their reason.
	got := e.entries(t)
	if len(got) != len(shelltest.ReadOnlyAllowed)+len(shelltest.ReadOnlyDenied) {
		t.Fatalf("%d log lines for %d decisions", len(got), len(shelltest.ReadOnlyAllowed)+len(shelltest.ReadOnlyDenied))
	}
	last := got[len(got)-1]
	if last.Decision != "deny" || last.Hook != "read-only" || last.Tool != "Bash" || last.Session != "s-1" ||
		last.Detail != shelltest.ReadOnlyDenied[len(shelltest.ReadOnlyDenied)-1] || last.Reason == "" {
		t.Fatalf("last log entry %+v", last)
	}
}

func TestMainFailsClosed(t *testing.T) {
	e := newEnv(t)
	var stderr bytes.Buffer
	for name, args := range map[string][]string{
		"no name":        {},
		"two names":      {"ask-gate", "read-only"},
		"unknown hook":   {"nope"},
		"bad flag":       {"--bogus", "ask-gate"},
		"flag no value":  {"ask-gate", "--log"},
		"relative ws":    {"--workspace", "rel/ws", "ask-gate"},
		"help is a deny": {"--help"},
	} {
		stderr.Reset()
		code := Main(args, bytes.NewReader(bash("ls")), &stderr, e.getenv)
		if code != ExitDeny || stderr.Len() == 0 {
			t.Errorf("%s: exit %d, stderr %q; want a deny with a reason", name, code, stderr.String())
		}
	}
	// An unwritable decision log turns an allow into a deny.
	stderr.Reset()
	code := Main([]string{"--log", filepath.Join(e.workspace, "no", "such", "dir", "log"), "read-only"},
		bytes.NewReader(bash("ls")), &stderr, e.getenv)
	if code != ExitDeny || !strings.Contains(stderr.String(), "decision log") {
		t.Fatalf("unwritable log: exit %d, %q", code, stderr.String())
	}
	// SBX_HOOK_LOG moves the log.
	alt := filepath.Join(e.workspace, "alt.log")
	code = Main([]string{"read-only"}, bytes.NewReader(bash("ls")), &stderr, func(k string) string {
		if k == "SBX_HOOK_LOG" {
			return alt
		}
		return e.getenv(k)
	})
	if b, _ := os.ReadFile(alt); code != ExitAllow || !bytes.Contains(b, []byte(`"decision":"allow"`)) {
		t.Fatalf("SBX_HOOK_LOG: exit %d, log %q", code, b)
	}
}

// execHook runs the test binary as `sbx hook ARGS...` with stdin.
func execHook(t testing.TB, e env, stdin []byte, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"hook"}, args...)...)
	cmd.Env = append(os.Environ(), "SBX_HOOKS_TEST_EXEC=1", "SBX_WORKSPACE="+e.workspace, "SBX_HOOK_LOG=")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr, stdout bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if stdout.Len() != 0 {
		t.Errorf("hook wrote to stdout: %q", stdout.String())
	}
	return code, stderr.String()
}

// TestHooksAsProcess drives both hooks through a real process: stdin JSON
// in, exit status and stderr out, as Claude Code sees them.
func TestHooksAsProcess(t *testing.T) {
	e := newEnv(t)
	q := filepath.Join(e.workspace, QuestionFile)
	for _, tc := range []struct {
		name     string
		args     []string
		question string
		in       []byte
		want     int
	}{
		{"ask-gate no question", []string{"ask-gate"}, "", bash("rm -rf build"), ExitAllow},
		{"ask-gate pending bash", []string{"ask-gate"}, "which db?", bash("ls"), ExitDeny},
		{"ask-gate pending write question", []string{"ask-gate"}, "which db?", payload("Write", map[string]any{"file_path": q, "content": "which db, really?"}), ExitAllow},
		{"ask-gate pending edit other", []string{"ask-gate"}, "which db?", payload("Edit", map[string]any{"file_path": "/workspace/repo/a.go"}), ExitDeny},
		{"ask-gate garbage", []string{"ask-gate"}, "", []byte("\x00garbage"), ExitDeny},
		{"read-only ls", []string{"read-only"}, "", bash("ls -la"), ExitAllow},
		{"read-only ls; rm", []string{"read-only"}, "", bash("ls; rm -rf x"), ExitDeny},
		{"read-only cat > b", []string{"read-only"}, "", bash("cat a > b"), ExitDeny},
		{"read-only $(rm x)", []string{"read-only"}, "", bash("echo $(rm x)"), ExitDeny},
		{"read-only find -delete", []string{"read-only"}, "", bash("find . -delete"), ExitDeny},
		{"read-only git -c", []string{"read-only"}, "", bash("git -c core.pager=sh log"), ExitDeny},
		{"read-only sed -i", []string{"read-only"}, "", bash("sed -i s/a/b/ f"), ExitDeny},
		{"read-only heredoc", []string{"read-only"}, "", bash("cat <<EOF\n$(rm x)\nEOF"), ExitDeny},
		{"read-only pipe to sh", []string{"read-only"}, "", bash("cat x | sh"), ExitDeny},
		{"read-only xargs rm", []string{"read-only"}, "", bash("ls | xargs rm"), ExitDeny},
		{"read-only git log", []string{"read-only"}, "", bash("git log --oneline -5 | cat"), ExitAllow},
		{"read-only Write", []string{"read-only"}, "", payload("Write", map[string]any{"file_path": "/workspace/a"}), ExitDeny},
		{"read-only empty stdin", []string{"read-only"}, "", nil, ExitDeny},
		{"unknown hook name", []string{"nope"}, "", bash("ls"), ExitDeny},
		{"no hook name", nil, "", bash("ls"), ExitDeny},
		{"bad flag", []string{"--nope", "read-only"}, "", bash("ls"), ExitDeny},
	} {
		os.Remove(q)
		if tc.question != "" {
			e.question(t, tc.question)
		}
		code, msg := execHook(t, e, tc.in, tc.args...)
		if code != tc.want {
			t.Errorf("%s: exit %d (%q), want %d", tc.name, code, msg, tc.want)
		}
		if code == ExitDeny && !strings.HasPrefix(msg, "sbx hook") {
			t.Errorf("%s: deny without a reason on stderr: %q", tc.name, msg)
		}
	}
	if n := len(e.entries(t)); n < 15 {
		t.Fatalf("only %d decisions logged by the processes", n)
	}
}

// FuzzMain feeds arbitrary stdin to both hooks: the exit status is 0 or 2,
// and input that is not valid JSON is never allowed.
func FuzzMain(f *testing.F) {
	f.Add([]byte(bash("ls")), false)
	f.Add([]byte(bash("rm x")), true)
	f.Add(payload("Write", map[string]any{"file_path": "/workspace/.agent.question", "content": "?"}), false)
	f.Add([]byte(`{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}`), true)
	f.Add([]byte(`{"hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{}}`), true)
	f.Add([]byte(`{`), false)
	f.Add([]byte(nil), true)
	e := env{workspace: f.TempDir()}
	e.log = filepath.Join(e.workspace, LogFile)
	os.WriteFile(filepath.Join(e.workspace, QuestionFile), []byte("pending?"), 0o644)
	f.Fuzz(func(t *testing.T, data []byte, readOnly bool) {
		hook := "ask-gate"
		if readOnly {
			hook = "read-only"
		}
		code, msg := e.run(hook, data)
		if code != ExitAllow && code != ExitDeny {
			t.Fatalf("exit %d", code)
		}
		if code == ExitAllow && !json.Valid(data) {
			t.Fatalf("%s allowed malformed input %q", hook, data)
		}
		if code == ExitDeny && msg == "" {
			t.Fatalf("%s denied without a reason", hook)
		}
	})
}

// BenchmarkHookProcess is one read-only decision as Claude Code pays for
// it: a process start, the JSON on stdin, the parse and the log line.
func BenchmarkHookProcess(b *testing.B) {
	e := env{workspace: b.TempDir()}
	in := bash(`git log --oneline -n 20 | grep -v fixup && sed -n '1,20p' main.go`)
	for b.Loop() {
		if code, msg := execHook(b, e, in, "read-only"); code != ExitAllow {
			b.Fatalf("exit %d: %s", code, msg)
		}
	}
}

// The lane hook is the ask-gate in the driver's lane and read-only in the
// side lane (SBX_LANE=side): one fixed list of managed hooks serves both.
func TestLaneHook(t *testing.T) {
	e := newEnv(t)
	write := payload("Write", map[string]any{"file_path": filepath.Join(e.workspace, "a"), "content": "x"})
	side := func(k string) string {
		if k == "SBX_LANE" {
			return SideLane
		}
		return e.getenv(k)
	}
	run := func(getenv func(string) string, in []byte) int {
		var stderr bytes.Buffer
		return Main([]string{"lane"}, bytes.NewReader(in), &stderr, getenv)
	}
	if code := run(e.getenv, write); code != ExitAllow {
		t.Errorf("driver lane, no question: a write is denied")
	}
	if code := run(side, write); code != ExitDeny {
		t.Errorf("side lane: a write is allowed")
	}
	if code := run(side, payload("Read", map[string]any{"file_path": filepath.Join(e.workspace, "a")})); code != ExitAllow {
		t.Errorf("side lane: a read is denied")
	}
	e.question(t, "Which word?")
	if code := run(e.getenv, write); code != ExitDeny {
		t.Errorf("driver lane, question pending: a write is allowed")
	}
}
