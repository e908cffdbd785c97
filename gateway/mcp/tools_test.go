package mcp

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/audit"
)

// out decodes a tool's structured result.
func out[T any](t testing.TB, res *sdk.CallToolResult) T {
	t.Helper()
	var v T
	if res.IsError {
		t.Fatalf("tool error: %s", text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return v
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu  sync.Mutex
	got []string
	at  []float64 // each notification's progress
}

func (p *progressLog) handler(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, r.Params.Message)
	p.at = append(p.at, r.Params.Progress)
}

// steps checks that the delegation's steps were notified, each as it
// started and as it ended, in order, before anything else, and that
// progress grew with every notification.
func (p *progressLog) steps(t *testing.T, want ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 1; i < len(p.at); i++ {
		if p.at[i] <= p.at[i-1] {
			t.Errorf("progress %v then %v: it must grow", p.at[i-1], p.at[i])
		}
	}
	if len(p.got) < 2*len(want) {
		t.Fatalf("progress %q: want the %d steps first", p.got, len(want))
	}
	took := regexp.MustCompile(`… \d+(\.\d)? (ms|s)$`)
	for i, w := range want {
		start, end := p.got[2*i], p.got[2*i+1]
		if !strings.HasPrefix(start, w) || !strings.HasSuffix(start, "…") || !strings.HasPrefix(end, w) || !took.MatchString(end) {
			t.Errorf("step %d notified %q then %q, want %q… and its duration", i+1, start, end, w)
		}
	}
}

func (p *progressLog) n() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.got) }

// TestEveryToolOnARealBox drives one real box (QEMU, the agent image, the
// script agent) through every tool, with the SDK's client in both protocol
// modes, and checks ownership, scopes, redaction and the audit rows.
func TestEveryToolOnARealBox(t *testing.T) {
	f := newFleetFront(t, Options{WaitMax: 90 * time.Second})
	aliceTok, _ := f.token(t, "alice", "write")
	aliceRead, _ := f.token(t, "alice", "read")
	bobTok, _ := f.token(t, "bob")

	var progress progressLog
	sl := func() *sdk.ClientSession {
		cs, err := connect(t, f.url, aliceTok, stateless, &sdk.ClientOptions{ProgressNotificationHandler: progress.handler})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}()
	alice := mustConnect(t, f.url, aliceTok, stateful)
	ro := mustConnect(t, f.url, aliceRead, stateless)
	bob := mustConnect(t, f.url, bobTok, stateful)

	// delegate: the script asks a question; the call waits for it,
	// sending progress meanwhile. The task carries the git token: it must
	// come back redacted everywhere.
	script := strings.Join([]string{
		"!say script agent: starting with " + f.secret,
		"!ask Which word should I add to README.md?",
		"!write README.md {answer}",
		"!commit script agent: add {answer}",
		"!sleep 4",
		"!say done",
	}, "\n")
	params := &sdk.CallToolParams{Name: "delegate", Arguments: map[string]any{
		"task": script, "agent": "script", "repos": []map[string]any{{"repo": "acme/widget"}}, "memory_mib": 640,
		// The operator's root setup step; its output (secret and all) goes
		// to the log, redacted like the agent's.
		"setup": "echo set up by $(id -un) with " + f.secret}}
	params.SetProgressToken("delegate-1")
	res, err := sl.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	run := out[RunOut](t, res)
	box := run.Box
	if run.State != "waiting" || run.Question != "Which word should I add to README.md?" {
		t.Fatalf("delegate: %+v", run)
	}
	progress.steps(t, "[1/5] cloning acme/widget", "[2/5] booting (", "[3/5] copying acme/widget in",
		"[4/5] running the setup script", "[5/5] starting the agent (script)")
	if progress.n() == 10 {
		t.Error("delegate sent no progress notification while it waited for the question")
	}
	if strings.Contains(text(res), f.secret) || !strings.Contains(run.Summary, "question: Which word") {
		t.Fatalf("delegate summary: %q", run.Summary)
	}

	// status, from the other protocol mode.
	st := out[BoxOut](t, call(t, alice, "status", map[string]any{"box": box}))
	if st.State != "waiting" || st.Owner != "alice" || st.Question == "" || len(st.Repos) != 1 || st.Repos[0].Name != "acme/widget" {
		t.Fatalf("status: %+v", st)
	}
	if strings.Contains(st.Task, f.secret) {
		t.Fatal("status shows the secret in the task")
	}

	// Another user's box is not found, worded like a box that does not exist.
	for _, name := range []string{"status", "watch", "diff", "teardown"} {
		theirs := call(t, bob, name, map[string]any{"box": box})
		none := call(t, bob, name, map[string]any{"box": "nosuchbox"})
		wantToolError(t, theirs, "not found", "call list")
		if strings.ReplaceAll(text(theirs), box, "X") != strings.ReplaceAll(text(none), "nosuchbox", "X") {
			t.Errorf("%s: another user's box answers %q, a missing one %q", name, text(theirs), text(none))
		}
	}
	if l := out[ListOut](t, call(t, bob, "list", nil)); len(l.Boxes) != 0 {
		t.Fatalf("bob lists alice's box: %+v", l)
	}

	// watch pages through the log and resumes from next_offset.
	w := out[LogOut](t, call(t, alice, "watch", map[string]any{"box": box}))
	redacted := "starting with ghp_…" + f.secret[len(f.secret)-4:]
	if !strings.Contains(w.Text, "set up by root with ghp_…") {
		t.Errorf("watch: the setup step's output is not in the log, redacted: %q", w.Text)
	}
	if !strings.Contains(w.Text, "question: Which word") || w.NextOffset <= 0 || strings.Contains(w.Text, f.secret) || !strings.Contains(w.Text, redacted) {
		t.Fatalf("watch: %+v", w)
	}
	w2 := out[LogOut](t, call(t, alice, "watch", map[string]any{"box": box, "from": w.NextOffset}))
	if w2.Text != "" || w2.NextOffset != w.NextOffset {
		t.Fatalf("watch from the end: %+v", w2)
	}
	one := out[LogOut](t, call(t, alice, "watch", map[string]any{"box": box, "max_lines": 1}))
	if one.Lines > 1 && !one.Truncated {
		t.Fatalf("watch max_lines 1: %+v", one)
	}
	wantToolError(t, call(t, alice, "watch", map[string]any{"box": box, "max_lines": 5001}), "5000")

	// A read-only key reads but cannot answer.
	out[BoxOut](t, call(t, ro, "status", map[string]any{"box": box}))
	wantToolError(t, call(t, ro, "answer", map[string]any{"box": box, "text": "no"}), `"write" scope`)

	// answer without waiting, then a follow-up mid-turn is queued.
	a := out[RunOut](t, call(t, alice, "answer", map[string]any{"box": box, "text": "banana", "wait_seconds": 0}))
	if a.Outcome != "answered" || a.State != "running" {
		t.Fatalf("answer: %+v", a)
	}
	q := out[RunOut](t, call(t, alice, "answer", map[string]any{"box": box, "text": "also add a changelog"}))
	if q.Outcome != "queued" || q.InboxID == 0 {
		t.Fatalf("follow-up mid-turn: %+v", q)
	}
	in := out[InboxOut](t, call(t, alice, "inbox", map[string]any{"box": box}))
	if len(in.Items) != 1 || in.Items[0].Text != "also add a changelog" || in.Items[0].By != "alice" {
		t.Fatalf("inbox: %+v", in)
	}
	// status until the queued follow-up ran and the box is done.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st = out[BoxOut](t, call(t, alice, "status", map[string]any{"box": box}))
		if st.State == "done" && st.Inbox == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("box never finished: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// diff shows the commit.
	d := out[DiffOut](t, call(t, alice, "diff", map[string]any{"box": box}))
	if len(d.Files) == 0 || !strings.Contains(d.Patch, "+banana") {
		t.Fatalf("diff: %+v", d)
	}

	// artifacts: list, read, and the same file as a resource.
	la := call(t, alice, "list_artifacts", map[string]any{"box": box})
	arts := out[ArtifactsOut](t, la)
	var dir string
	for _, e := range arts.Entries {
		if e.Dir && strings.Contains(e.Name, "widget") {
			dir = e.Path
		}
	}
	if dir == "" {
		t.Fatalf("list_artifacts: no widget dir in %+v", arts)
	}
	la = call(t, alice, "list_artifacts", map[string]any{"box": box, "path": dir})
	var link *sdk.ResourceLink
	for _, c := range la.Content {
		if l, ok := c.(*sdk.ResourceLink); ok && strings.HasSuffix(l.URI, "/README.md") {
			link = l
		}
	}
	if link == nil {
		t.Fatalf("list_artifacts %s: no resource link to README.md: %s", dir, text(la))
	}
	ra := out[ReadOut](t, call(t, alice, "read_artifact", map[string]any{"box": box, "path": dir + "/README.md"}))
	if !strings.Contains(ra.Text, "banana") || ra.Binary || ra.URI != link.URI {
		t.Fatalf("read_artifact: %+v (link %s)", ra, link.URI)
	}
	rr, err := sl.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: link.URI})
	if err != nil || len(rr.Contents) != 1 || !strings.Contains(rr.Contents[0].Text, "banana") {
		t.Fatalf("resources/read %s: %+v %v", link.URI, rr, err)
	}
	if _, err := bob.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: link.URI}); err == nil {
		t.Fatal("bob read alice's file as a resource")
	}
	wantToolError(t, call(t, alice, "read_artifact", map[string]any{"box": box, "path": "../etc/passwd"}), "inside /workspace")

	// follow-up on a done box resumes it; the call waits for the turn.
	r := out[RunOut](t, call(t, alice, "answer", map[string]any{"box": box, "text": "anything else?"}))
	if r.Outcome != "resumed" || r.State != "done" {
		t.Fatalf("follow-up when done: %+v", r)
	}

	// Sizes: the box has the one asked for; over a cap or below zero is
	// refused, naming the cap.
	sized := out[BoxOut](t, call(t, alice, "status", map[string]any{"box": box}))
	if sized.MemoryMiB != 640 || sized.CPUs != 1 || sized.Deadline == "" {
		t.Fatalf("status of a memory_mib 640 box: %+v", sized)
	}
	wantToolError(t, call(t, alice, "delegate", map[string]any{"task": "x", "agent": "script", "memory_mib": 4096}), "box.max_memory_mib")
	wantToolError(t, call(t, alice, "delegate", map[string]any{"task": "x", "agent": "script", "cpus": 3}), "box.max_cpus")
	wantToolError(t, call(t, alice, "delegate", map[string]any{"task": "x", "agent": "script", "cpus": -1}), "must be positive")
	// extend moves the deadline; bad durations and the lifetime cap are
	// refused; the read-only key and another user may not.
	ext := out[BoxOut](t, call(t, alice, "extend", map[string]any{"box": box, "by": "30m"}))
	was, _ := time.Parse(time.RFC3339, sized.Deadline)
	if now, _ := time.Parse(time.RFC3339, ext.Deadline); now.Sub(was).Round(time.Second) != 30*time.Minute {
		t.Fatalf("extend 30m: deadline %s, was %s", ext.Deadline, sized.Deadline)
	}
	wantToolError(t, call(t, alice, "extend", map[string]any{"box": box, "by": "soon"}), "duration \"soon\"")
	wantToolError(t, call(t, alice, "extend", map[string]any{"box": box, "by": "2h"}), "box.max_lifetime", "at most 1h30m0s")
	wantToolError(t, call(t, ro, "extend", map[string]any{"box": box, "by": "1m"}), "write")
	wantToolError(t, call(t, bob, "extend", map[string]any{"box": box, "by": "1m"}), "not found")

	// keep, sleep, wake, list, teardown.
	if k := out[BoxOut](t, call(t, alice, "keep", map[string]any{"box": box})); !k.Keep {
		t.Fatalf("keep: %+v", k)
	}
	if k := out[BoxOut](t, call(t, alice, "keep", map[string]any{"box": box, "keep": false})); k.Keep {
		t.Fatalf("keep false: %+v", k)
	}
	if s := out[BoxOut](t, call(t, alice, "sleep", map[string]any{"box": box})); s.State != "sleeping" {
		t.Fatalf("sleep: %+v", s)
	}
	wantToolError(t, call(t, alice, "sleep", map[string]any{"box": box}), "status")
	if s := out[BoxOut](t, call(t, alice, "wake", map[string]any{"box": box})); s.State != "done" {
		t.Fatalf("wake: %+v", s)
	}
	if l := out[ListOut](t, call(t, alice, "list", nil)); len(l.Boxes) != 1 || l.Boxes[0].Name != box {
		t.Fatalf("list: %+v", l)
	}
	// The real external client: the MCP Inspector CLI calls status in both eras.
	for _, era := range []string{"legacy", "modern"} {
		got := inspect(t, f.url, aliceTok, era, "--method", "tools/call", "--tool-name", "status", "--tool-arg", "box="+box)
		if !strings.Contains(got, `\"state\":\"done\"`) && !strings.Contains(got, `"state": "done"`) {
			t.Errorf("inspector (%s) status:\n%s", era, got)
		}
	}
	if td := out[TeardownOut](t, call(t, alice, "teardown", map[string]any{"box": box})); !td.Destroyed {
		t.Fatalf("teardown: %+v", td)
	}
	wantToolError(t, call(t, alice, "status", map[string]any{"box": box}), "not found")

	// Every call left an audit row naming the tool and the box.
	rows, err := f.audit.List(context.Background(), audit.Filter{User: "alice", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, row := range rows {
		if row.Front == Front && strings.HasPrefix(row.Action, "mcp.") {
			seen[row.Action+" "+row.Target+" "+row.Result] = true
		}
	}
	for _, want := range []string{
		"mcp.delegate " + box + " ok", "mcp.status " + box + " ok", "mcp.watch " + box + " ok",
		"mcp.answer " + box + " ok", "mcp.answer " + box + " denied", "mcp.inbox " + box + " ok",
		"mcp.diff " + box + " ok", "mcp.list_artifacts " + box + " ok", "mcp.read_artifact " + box + " ok",
		"mcp.resource " + box + " ok", "mcp.keep " + box + " ok", "mcp.sleep " + box + " ok",
		"mcp.wake " + box + " ok", "mcp.teardown " + box + " ok", "mcp.list  ok", "mcp.status " + box + " error",
	} {
		if !seen[want] {
			t.Errorf("no audit row %q", want)
		}
	}
}
