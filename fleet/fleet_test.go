package fleet_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// The whole run with the script agent against a real box and a real git
// server: delegate, live log, the question and the ask-gate's deny while it
// is pending, the answer, the diff and the commit; nothing of the token in
// the box; nothing of the box for another user.
func TestDelegateScriptAgentEndToEnd(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	events := e.fleet.Events(ctx, e.alice)
	bobEvents := e.fleet.Events(ctx, e.bob)

	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{
		Task: "add a word to the README", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.State != fleet.Running || b.Owner != "alice" || len(b.Repos) != 1 || b.Repos[0].Base == "" {
		t.Fatalf("delegated box: %+v", b)
	}
	name := b.Name

	// Follow the log live from offset 0 while the agent works.
	follow, err := e.fleet.Logs(ctx, e.alice, name, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()

	w := e.waitState(name, fleet.Waiting)
	if got := w.Question.String(); got != "Which word should I add to README.md?" {
		t.Errorf("question: %q", got)
	}
	l := e.log(name)
	if !strings.Contains(l, "ask-gate denied the tool call (exit 2)") {
		t.Errorf("the agent's tool call while its question was pending was not denied:\n%s", l)
	}
	var followed strings.Builder
	for !strings.Contains(followed.String(), "question: Which word") {
		c, err := follow.Next(ctx)
		if err != nil {
			t.Fatalf("follow: %v after %q", err, followed.String())
		}
		followed.WriteString(c.Text.String())
		if c.Offset != follow.Offset() {
			t.Errorf("chunk offset %d, stream offset %d", c.Offset, follow.Offset())
		}
	}

	res, err := e.fleet.Answer(ctx, e.alice, name, "banana")
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != fleet.Answered || res.Box.State != fleet.Running || res.Box.Question.Len() != 0 {
		t.Errorf("answer: %+v", res)
	}
	if _, err := e.fleet.Answer(ctx, e.alice, name, "again"); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("second answer with no question pending: %v", err)
	}
	e.waitState(name, fleet.Done)
	l = e.waitLog(name, "done")
	for _, want := range []string{"answer received: banana", "wrote /workspace/widget/README.md", "committed"} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %q:\n%s", want, l)
		}
	}

	d, err := e.fleet.Diff(ctx, e.alice, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 1 || d.Files[0].Path.String() != "widget/README.md" || d.Files[0].Added != 1 {
		t.Errorf("diff files: %+v", d.Files)
	}
	if !strings.Contains(d.Patch.String(), "+banana") || !strings.Contains(d.Patch.String(), "b/widget/README.md") {
		t.Errorf("patch:\n%s", d.Patch)
	}
	p, err := e.fleet.Exec(ctx, e.alice, name, fleet.ExecRequest{Argv: []string{"git", "log", "--format=%s", "-1"}, Dir: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if st, _ := p.Wait(); st.Code != 0 || strings.TrimSpace(string(out)) != "script agent: add banana" {
		t.Errorf("last commit: %q %+v", out, st)
	}

	assertNoToken(t, e, name)

	// Events: alice saw her box move; bob saw nothing of it.
	seen := map[fleet.State]bool{}
drain:
	for {
		select {
		case ev := <-events:
			if ev.Box == name {
				seen[ev.State] = true
			}
		case <-time.After(300 * time.Millisecond):
			break drain
		}
	}
	for _, s := range []fleet.State{fleet.Running, fleet.Waiting, fleet.Done} {
		if !seen[s] {
			t.Errorf("no %s event for alice (saw %v)", s, seen)
		}
	}
	select {
	case ev := <-bobEvents:
		t.Errorf("bob saw an event of alice's box: %+v", ev)
	default:
	}

	// Ownership: every call by bob answers exactly like a missing box.
	assertInvisible(t, e, e.bob, name)
	if list, _ := e.fleet.List(ctx, e.bob); len(list) != 0 {
		t.Errorf("bob lists %d boxes", len(list))
	}
	if list, _ := e.fleet.List(ctx, e.admin); len(list) != 1 {
		t.Errorf("admin lists %d boxes, want 1", len(list))
	}

	// Side question: answered read-only without disturbing the box.
	ans, err := e.fleet.Ask(ctx, e.alice, name, "what is here?", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ans.String(), "widget") || !strings.Contains(ans.String(), "read-only hook denied a write") {
		t.Errorf("side answer: %s", ans)
	}
	if got, _ := e.fleet.Get(ctx, e.alice, name); got.State != fleet.Done || got.Turns != 2 {
		t.Errorf("after a side question: %s, %d turns", got.State, got.Turns)
	}

	if err := e.fleet.Destroy(ctx, e.alice, name); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fleet.Get(ctx, e.alice, name); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("get after destroy: %v", err)
	}
}

// assertNoToken searches the box's whole file system and every process's
// environment for the account token. The token goes to the search on
// stdin, so the search itself holds it in no environment or file.
func assertNoToken(t *testing.T, e *env, name string) {
	t.Helper()
	ctx := e.ctx()
	p, err := e.fleet.Exec(ctx, e.admin, name, fleet.ExecRequest{Argv: []string{"/bin/sh", "-c", testutil.NoSecretScript}})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), e.token+"\n")
	p.Stdin().Close()
	out, _ := io.ReadAll(p.Stdout())
	p.Wait()
	if strings.TrimSpace(string(out)) != "hits:" {
		t.Errorf("the account token is inside the box: %s", out)
	}
}

// assertInvisible runs every box call as caller and wants not-found, worded
// like a box that does not exist.
func assertInvisible(t *testing.T, e *env, caller keys.Actor, name string) {
	t.Helper()
	ctx := context.Background()
	_, missing := e.fleet.Get(ctx, caller, "no-such-box")
	calls := map[string]func() error{
		"get":      func() error { _, err := e.fleet.Get(ctx, caller, name); return err },
		"logs":     func() error { _, err := e.fleet.Logs(ctx, caller, name, 0, false); return err },
		"answer":   func() error { _, err := e.fleet.Answer(ctx, caller, name, "x"); return err },
		"followup": func() error { _, err := e.fleet.FollowUp(ctx, caller, name, "x", false); return err },
		"inbox":    func() error { _, err := e.fleet.Inbox(ctx, caller, name); return err },
		"inboxrm":  func() error { return e.fleet.RemoveInbox(ctx, caller, name, 1) },
		"ask":      func() error { _, err := e.fleet.Ask(ctx, caller, name, "x", false); return err },
		"diff":     func() error { _, err := e.fleet.Diff(ctx, caller, name); return err },
		"sleep":    func() error { _, err := e.fleet.Sleep(ctx, caller, name); return err },
		"wake":     func() error { _, err := e.fleet.Wake(ctx, caller, name); return err },
		"keep":     func() error { _, err := e.fleet.Keep(ctx, caller, name, true); return err },
		"allow":    func() error { _, err := e.fleet.SetAllow(ctx, caller, name, []string{"example.com"}); return err },
		"editallow": func() error {
			_, err := e.fleet.EditAllow(ctx, caller, name, []string{"example.com"}, nil)
			return err
		},
		"stats": func() error { _, err := e.fleet.Stats(ctx, caller, name); return err },
		"exec": func() error {
			_, err := e.fleet.Exec(ctx, caller, name, fleet.ExecRequest{Argv: []string{"true"}})
			return err
		},
		"stat":     func() error { _, err := e.fleet.Stat(ctx, caller, name, "."); return err },
		"readdir":  func() error { _, err := e.fleet.ReadDir(ctx, caller, name, "."); return err },
		"artifact": func() error { _, _, err := e.fleet.Artifact(ctx, caller, name, "widget/README.md"); return err },
		"write": func() error {
			return e.fleet.WriteFile(ctx, caller, name, "x", 0o644, strings.NewReader("x"))
		},
		"mkdir":   func() error { return e.fleet.MkdirAll(ctx, caller, name, "d", 0o755) },
		"remove":  func() error { return e.fleet.Remove(ctx, caller, name, "widget") },
		"destroy": func() error { return e.fleet.Destroy(ctx, caller, name) },
	}
	for op, call := range calls {
		err := call()
		if !errors.Is(err, fleet.ErrNotFound) {
			t.Errorf("%s by %s on %s's box: %v, want not-found", op, caller.User, "alice", err)
			continue
		}
		want := strings.ReplaceAll(missing.Error(), "no-such-box", name)
		if err.Error() != want {
			t.Errorf("%s by %s: %q differs from a missing box's %q", op, caller.User, err, want)
		}
	}
}

// Bad input: a one-line error, nothing created, nothing lost.
func TestDelegateRefusesBadInput(t *testing.T) {
	e := newEnv(t, fleet.Policy{MaxBoxesPerUser: 1})
	ctx := e.ctx()
	other := gittest.New(t, gittest.Options{Token: "ghp_" + strings.Repeat("z", 36)})
	other.CreateRepo("acme", "secret", map[string]string{"a": "b"})
	cases := []struct {
		name string
		req  fleet.DelegateRequest
		want error
	}{
		{"empty task", fleet.DelegateRequest{Task: "  \n"}, fleet.ErrInvalid},
		{"unknown profile", fleet.DelegateRequest{Task: "x", Agent: "gpt"}, fleet.ErrInvalid},
		{"unknown repo", fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: "acme/nope"}}}, fleet.ErrInvalid},
		{"bad repo name", fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: "../../etc"}}}, fleet.ErrInvalid},
		{"other host", fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: other.URL + "/acme/secret"}}}, fleet.ErrInvalid},
		{"bad ref", fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: "acme/widget", Ref: "--upload-pack=evil"}}}, fleet.ErrInvalid},
		{"missing ref", fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: "acme/widget", Ref: "no-such-branch"}}}, fleet.ErrInvalid},
		{"bad domain", fleet.DelegateRequest{Task: "x", Agent: "script", Allow: []string{"exa mple.com"}}, fleet.ErrInvalid},
	}
	for _, c := range cases {
		_, err := e.fleet.Delegate(ctx, e.alice, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", c.name, err)
		}
		if strings.Contains(err.Error(), e.token) {
			t.Errorf("%s: error holds the token", c.name)
		}
	}
	if list, _ := e.fleet.List(ctx, e.admin); len(list) != 0 || len(e.vm.List()) != 0 {
		t.Fatalf("bad input created something: %d boxes, %d machines", len(list), len(e.vm.List()))
	}
	// Caps: the second box of a user is refused before anything is made.
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say one", Agent: "script"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say two", Agent: "script"}); !errors.Is(err, fleet.ErrLimit) {
		t.Errorf("second box over the per-user cap: %v", err)
	}
	if n := len(e.vm.List()); n != 1 {
		t.Errorf("%d machines after a refused delegate", n)
	}
	e.waitState(b.Name, fleet.Done)
	for _, text := range []string{"", "   "} {
		if _, err := e.fleet.Answer(ctx, e.alice, b.Name, text); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("empty answer: %v", err)
		}
	}
	if _, err := e.fleet.Answer(ctx, e.alice, b.Name, "no question"); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("answer with no pending question: %v", err)
	}
	if _, err := e.fleet.Get(ctx, e.alice, "../etc"); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("bad box name: %v", err)
	}
}

// Secrets printed inside a box reach the log redacted, whatever the chunking.
func TestLogIsRedacted(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script",
		Task: "!say token " + e.token + " end\n!say aws AKIAIOSFODNN7EXAMPLE\n!env"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(b.Name, fleet.Done)
	l := e.log(b.Name)
	if strings.Contains(l, e.token) || strings.Contains(l, "AKIAIOSFODNN7EXAMPLE") {
		t.Errorf("log holds a secret:\n%s", l)
	}
	if !strings.Contains(l, "ghp_…"+e.token[len(e.token)-4:]) {
		t.Errorf("redacted token not shown with its tail:\n%s", l)
	}
	if got, _ := e.fleet.Get(ctx, e.alice, b.Name); strings.Contains(got.Task.String(), e.token) {
		t.Errorf("task shown with the token: %s", got.Task)
	}
}

// Idle sleep and the sleep TTL on an injected clock; a kept box survives.
func TestLifecycleTimers(t *testing.T) {
	e := newEnv(t, fleet.Policy{IdleSleep: time.Minute, SleepTTL: 10 * time.Minute})
	ctx := e.ctx()
	a, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say a", Agent: "script"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "!say k", Agent: "script", Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(a.Name, fleet.Done)
	e.waitState(k.Name, fleet.Done)
	e.fleet.Tick(ctx)
	if b, _ := e.fleet.Get(ctx, e.alice, a.Name); b.State != fleet.Done {
		t.Fatalf("slept before the idle time: %s", b.State)
	}
	e.clock.Add(61 * time.Second)
	e.fleet.Tick(ctx)
	for _, n := range []string{a.Name, k.Name} {
		b, _ := e.fleet.Get(ctx, e.alice, n)
		if b.State != fleet.Sleeping {
			t.Fatalf("%s after idle time: %s", n, b.State)
		}
		if n == a.Name && !b.Expires.Equal(b.SleptAt.Add(10*time.Minute)) {
			t.Errorf("expiry %v, slept at %v", b.Expires, b.SleptAt)
		}
	}
	// The TTL counts from the nap, not from the delegation.
	e.clock.Add(9 * time.Minute)
	e.fleet.Tick(ctx)
	if b, _ := e.fleet.Get(ctx, e.alice, a.Name); b.State != fleet.Sleeping {
		t.Fatalf("destroyed before its TTL: %s", b.State)
	}
	e.clock.Add(2 * time.Minute)
	e.fleet.Tick(ctx)
	if _, err := e.fleet.Get(ctx, e.alice, a.Name); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("past its TTL: %v", err)
	}
	b, err := e.fleet.Get(ctx, e.alice, k.Name)
	if err != nil || b.State != fleet.Sleeping {
		t.Fatalf("kept box: %+v %v", b, err)
	}
	// Wake brings it back where it was; the log is intact.
	if b, err = e.fleet.Wake(ctx, e.alice, k.Name); err != nil || b.State != fleet.Done {
		t.Fatalf("wake: %+v %v", b, err)
	}
	if !strings.Contains(e.log(k.Name), "k\n") {
		t.Errorf("log after wake:\n%s", e.log(k.Name))
	}
}

// A gateway restart mid-turn loses nothing: the turn goes on in the box and
// the new core follows it from the stored offset, each line logged once.
func TestRestartMidRun(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script",
		Task: "!say before\n!sleep 2\n!say after\n!ask more?\n!say resumed {answer}"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b.Name, "before")
	if err := e.fleet.Close(); err != nil {
		t.Fatal(err)
	}
	e.fleet = nil
	time.Sleep(2500 * time.Millisecond) // "after" is written while no core runs
	e.start()
	e.waitState(b.Name, fleet.Waiting)
	if _, err := e.fleet.FollowUp(ctx, e.alice, b.Name, "yes", false); err != nil {
		t.Fatal(err)
	}
	e.waitState(b.Name, fleet.Done)
	l := e.log(b.Name)
	for _, w := range []string{"before\n", "after\n", "resumed yes\n"} {
		if strings.Count(l, w) != 1 {
			t.Errorf("%q appears %d times:\n%s", w, strings.Count(l, w), l)
		}
	}
}

// Follow-ups sent mid-turn queue in the inbox and run in order; force
// interrupts the turn.
func TestInboxQueuesMidTurn(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script", Task: "!say start\n!sleep 3\n!say slow done"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b.Name, "start")
	r1, err := e.fleet.FollowUp(ctx, e.alice, b.Name, "first", false)
	if err != nil || r1.Outcome != fleet.Queued {
		t.Fatalf("follow-up mid-turn: %+v %v", r1, err)
	}
	r2, _ := e.fleet.FollowUp(ctx, e.alice, b.Name, "second", false)
	items, _ := e.fleet.Inbox(ctx, e.alice, b.Name)
	if len(items) != 2 || items[0].Text.String() != "first" {
		t.Fatalf("inbox: %+v", items)
	}
	if err := e.fleet.RemoveInbox(ctx, e.alice, b.Name, r2.InboxID); err != nil {
		t.Fatal(err)
	}
	if err := e.fleet.RemoveInbox(ctx, e.alice, b.Name, r2.InboxID); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("remove twice: %v", err)
	}
	e.waitLog(b.Name, "answer received: first")
	e.waitState(b.Name, fleet.Done)
	if l := e.log(b.Name); strings.Contains(l, "second") || !strings.Contains(l, "slow done") {
		t.Errorf("log:\n%s", l)
	}
	// force: a long turn is interrupted and the text starts a new one.
	b2, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script", Task: "!say long\n!sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitLog(b2.Name, "long")
	r, err := e.fleet.FollowUp(ctx, e.alice, b2.Name, "stop that", true)
	if err != nil || r.Outcome != fleet.Resumed {
		t.Fatalf("forced follow-up: %+v %v", r, err)
	}
	e.waitLog(b2.Name, "interrupted by alice")
	// What the agent makes of the new message is its own business; the
	// turn runs and ends.
	e.waitLog(b2.Name, "── turn 2 ended")
	e.waitState(b2.Name, fleet.Done, fleet.Waiting)
}

// Every output path of the core is redacted (issue 4): the question, the
// task, queued follow-ups, text artifacts by content whatever their name,
// diff bodies and paths, and error messages; binary artifacts stay exact.
func TestEveryOutputPathIsRedacted(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	tok := e.token
	tail := tok[len(tok)-4:]
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
		Task: "!say use " + tok + "\n!write .env GITHUB_TOKEN=" + tok + "\n!write notes " + tok +
			"\n!ask is " + tok + " right?\n!sleep 2\n!write README.md {answer}"})
	if err != nil {
		t.Fatal(err)
	}
	w := e.waitState(b.Name, fleet.Waiting)
	safe := func(what, s string) {
		t.Helper()
		if strings.Contains(s, tok) {
			t.Errorf("%s holds the token: %s", what, s)
		}
	}
	safe("question", w.Question.String())
	if !strings.Contains(w.Question.String(), "…"+tail) {
		t.Errorf("question not shown redacted with its tail: %q", w.Question)
	}
	safe("task", w.Task.String())
	if _, err := e.fleet.FollowUp(ctx, e.alice, b.Name, "answer "+tok, false); err != nil {
		t.Fatal(err)
	}
	if r, err := e.fleet.FollowUp(ctx, e.alice, b.Name, "queued "+tok, false); err != nil || r.Outcome != fleet.Queued {
		t.Fatalf("queue: %+v %v", r, err)
	}
	items, _ := e.fleet.Inbox(ctx, e.alice, b.Name)
	if len(items) != 1 {
		t.Fatalf("inbox: %+v", items)
	}
	safe("inbox item", items[0].Text.String())
	e.waitState(b.Name, fleet.Done)
	for _, name := range []string{"widget/.env", "widget/notes", "widget/README.md"} {
		rc, _, err := e.fleet.Artifact(ctx, e.alice, b.Name, name)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		safe("artifact "+name, string(body))
		if !strings.Contains(string(body), tail) {
			t.Errorf("artifact %s lost the redacted token's tail: %q", name, body)
		}
	}
	// A binary file holding the token's bytes is redacted too (issue 15),
	// the bytes around the token untouched.
	bin := append([]byte{0, 1, 2, 0}, []byte(tok)...)
	if err := e.fleet.WriteFile(ctx, e.alice, b.Name, "blob.bin", 0o644, strings.NewReader(string(bin))); err != nil {
		t.Fatal(err)
	}
	rc, _, err := e.fleet.Artifact(ctx, e.alice, b.Name, "blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	safe("binary artifact", string(got))
	if !strings.HasPrefix(string(got), "\x00\x01\x02\x00") || !strings.Contains(string(got), tail) {
		t.Errorf("binary artifact: %q", got)
	}
	d, err := e.fleet.Diff(ctx, e.alice, b.Name)
	if err != nil {
		t.Fatal(err)
	}
	safe("diff", d.Patch.String())
	for _, f := range d.Files {
		safe("diff path", f.Path.String())
	}
	safe("log", e.log(b.Name))
	// Errors: a repo name carrying the token comes back redacted.
	_, err = e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Task: "x", Agent: "script", Repos: []fleet.RepoSpec{{Repo: "acme/" + tok}}})
	if err == nil {
		t.Fatal("delegate to a missing repo worked")
	}
	safe("error", err.Error())
}
