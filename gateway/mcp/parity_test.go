package mcp

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
)

// TestParityToolsOnARealBox drives the tools MCP shares with SSH's ask,
// inbox rm and pool over the SDK's client, on a real box (QEMU, the agent
// image, the script agent): a side question answered from the box's
// read-only lane, a queued follow-up taken back, the warm pool read and
// resized by an admin only; scopes, ownership, annotations and audit rows.
func TestParityToolsOnARealBox(t *testing.T) {
	f := newFleetFront(t, Options{WaitMax: 90 * time.Second})
	aliceTok, _ := f.token(t, "alice", "write")
	aliceRead, _ := f.token(t, "alice", "read")
	bobTok, _ := f.token(t, "bob")
	rootTok, _ := f.token(t, "root", "write")
	alice := mustConnect(t, f.url, aliceTok, stateful)
	ro := mustConnect(t, f.url, aliceRead, stateless)
	bob := mustConnect(t, f.url, bobTok, stateless)
	root := mustConnect(t, f.url, rootTok, stateful)

	// The annotations say what each tool does to a box.
	list, err := alice.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type hints struct{ ro, destructive bool }
	want := map[string]hints{"ask": {false, false}, "allow": {false, false}, "inbox_remove": {false, true}, "pool": {true, false}, "pool_set": {false, false}}
	for _, tl := range list.Tools {
		w, ok := want[tl.Name]
		if !ok {
			continue
		}
		delete(want, tl.Name)
		d := tl.Annotations.DestructiveHint != nil && *tl.Annotations.DestructiveHint
		if tl.Annotations.ReadOnlyHint != w.ro || d != w.destructive {
			t.Errorf("tool %s: readOnly %v destructive %v, want %+v", tl.Name, tl.Annotations.ReadOnlyHint, d, w)
		}
	}
	if len(want) != 0 {
		t.Fatalf("tools missing: %v", want)
	}

	// A box whose turn lasts: a follow-up sent meanwhile is queued.
	run := out[RunOut](t, call(t, alice, "delegate", map[string]any{"task": "!say started\n!sleep 120\n!say done", "agent": "script",
		"repos": []map[string]any{{"repo": "acme/widget"}}, "wait_seconds": 0}))
	box := run.Box
	q := out[RunOut](t, call(t, alice, "answer", map[string]any{"box": box, "text": "then add a changelog", "wait_seconds": 0}))
	if q.Outcome != "queued" || q.InboxID == 0 {
		t.Fatalf("follow-up mid-turn: %+v", q)
	}
	wantToolError(t, call(t, ro, "inbox_remove", map[string]any{"box": box, "id": q.InboxID}), `"write" scope`)
	wantToolError(t, call(t, bob, "inbox_remove", map[string]any{"box": box, "id": q.InboxID}), "not found", "call list")
	wantToolError(t, call(t, alice, "inbox_remove", map[string]any{"box": box, "id": q.InboxID + 1000}), "not found", "call inbox")
	if in := out[InboxOut](t, call(t, alice, "inbox", map[string]any{"box": box})); len(in.Items) != 1 {
		t.Fatalf("a refused removal changed the inbox: %+v", in)
	}
	if r := out[InboxRemoveOut](t, call(t, alice, "inbox_remove", map[string]any{"box": box, "id": q.InboxID})); !r.Removed || r.ID != q.InboxID {
		t.Fatalf("inbox_remove: %+v", r)
	}
	if in := out[InboxOut](t, call(t, alice, "inbox", map[string]any{"box": box})); len(in.Items) != 0 {
		t.Fatalf("inbox after inbox_remove: %+v", in)
	}

	// The side question, mid-turn: the read-only lane answers from the box.
	wantToolError(t, call(t, ro, "ask", map[string]any{"box": box, "question": "what is here?"}), `"write" scope`)
	wantToolError(t, call(t, bob, "ask", map[string]any{"box": box, "question": "what is here?"}), "not found", "call list")
	wantToolError(t, call(t, alice, "ask", map[string]any{"box": box, "question": " "}), "question", "Fix the argument")
	a := out[AskOut](t, call(t, alice, "ask", map[string]any{"box": box, "question": "what is here?", "fresh": true}))
	for _, w := range []string{`side answer to "what is here?"`, "widget", "read-only hook denied a write"} {
		if !strings.Contains(a.Answer, w) {
			t.Errorf("ask answered %q, lacking %q", a.Answer, w)
		}
	}
	if st := out[BoxOut](t, call(t, alice, "status", map[string]any{"box": box})); st.State != "running" {
		t.Errorf("the side question disturbed the turn: %+v", st)
	}

	// The allow-list: added to, refused by the core, replaced, cleared.
	wantToolError(t, call(t, ro, "allow", map[string]any{"box": box, "domains": []string{"pypi.org"}}), `"write" scope`)
	wantToolError(t, call(t, bob, "allow", map[string]any{"box": box, "domains": []string{"pypi.org"}}), "not found", "call list")
	wantToolError(t, call(t, alice, "allow", map[string]any{"box": box}), "domains")
	wantToolError(t, call(t, alice, "allow", map[string]any{"box": box, "domains": []string{"http://x/"}}), `allowed domain "http://x/"`, "Fix the argument")
	if al := out[AllowOut](t, call(t, alice, "allow", map[string]any{"box": box, "domains": []string{"pypi.org"}})); !slices.Equal(al.Allow, []string{"pypi.org"}) {
		t.Fatalf("allow: %+v", al)
	}
	if al := out[AllowOut](t, call(t, alice, "allow", map[string]any{"box": box, "domains": []string{"*.example.com:8443"}})); !slices.Equal(al.Allow, []string{"pypi.org", "*.example.com:8443"}) {
		t.Fatalf("allow adds: %+v", al)
	}
	if al := out[AllowOut](t, call(t, alice, "allow", map[string]any{"box": box, "replace": true})); len(al.Allow) != 0 {
		t.Fatalf("allow replace with none: %+v", al)
	}

	// The warm pool is an admin's, as over SSH.
	wantToolError(t, call(t, alice, "pool", nil), "admins", "ask an admin")
	wantToolError(t, call(t, alice, "pool_set", map[string]any{"size": 0}), "admins")
	p := out[PoolOut](t, call(t, root, "pool", nil))
	if p.Target != 0 || p.Ready != 0 {
		t.Fatalf("pool: %+v", p)
	}
	wantToolError(t, call(t, root, "pool_set", map[string]any{"size": 65}), "0 to 64")
	wantToolError(t, call(t, root, "pool_set", map[string]any{}), "size")
	if p = out[PoolOut](t, call(t, root, "pool_set", map[string]any{"size": 0})); p.Target != 0 {
		t.Fatalf("pool_set 0: %+v", p)
	}
	out[TeardownOut](t, call(t, alice, "teardown", map[string]any{"box": box}))

	rows, err := f.audit.List(context.Background(), audit.Filter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, row := range rows {
		seen[row.Actor+" "+row.Action+" "+row.Target+" "+row.Result] = true
	}
	for _, w := range []string{
		"alice mcp.ask " + box + " ok", "alice mcp.ask " + box + " denied", "alice mcp.inbox_remove " + box + " ok",
		"alice mcp.inbox_remove " + box + " denied", "alice mcp.pool  denied", "root mcp.pool  ok", "root mcp.pool_set  ok",
		"alice box.inbox.rm " + box + " ok", "alice box.ask " + box + " ok", "alice mcp.allow " + box + " ok", "alice box.allow " + box + " ok",
	} {
		if !seen[w] {
			t.Errorf("no audit row %q", w)
		}
	}
}
