package sshd

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
)

// TestCheckpointRewindFork drives checkpoint, rewind and fork through the
// real OpenSSH client against real QEMU boxes holding a real git clone:
// a file written, checkpointed, changed and deleted comes back with a
// rewind; a fork has the file and its own branch, and its writes stay its
// own. It logs how long checkpoints and forks take.
func TestCheckpointRewindFork(t *testing.T) {
	g := newGatewayFrom(t, fleettest.Options{}, nil)
	name := strings.TrimSpace(g.must("alice", "new", "--agent", "script", "--repo", "acme/widget", `"!say ready"`))
	g.waitState("alice", name, fleet.Done)
	sh := func(box, script string) string {
		t.Helper()
		return g.must("alice", "exec", box, "--", "sh", "-c", "'"+script+"'")
	}
	const notes = "/workspace/widget/notes.txt"
	sh(name, "echo one > "+notes)

	// Checkpoint (three times, for the figure), then change and delete.
	type cpOut struct {
		OK         bool
		Checkpoint fleet.Checkpoint
	}
	var cps []fleet.Checkpoint
	var cpTimes []time.Duration
	for i, label := range []string{"first", "second", "third"} {
		start := time.Now()
		var out cpOut
		if err := json.Unmarshal([]byte(g.must("alice", "checkpoint", "--json", name, label)), &out); err != nil || !out.OK || out.Checkpoint.Label != label {
			t.Fatalf("checkpoint --json: %v %+v", err, out)
		}
		cpTimes = append(cpTimes, time.Since(start))
		cps = append(cps, out.Checkpoint)
		if i == 0 {
			sh(name, "echo two > "+notes)
		}
	}
	t.Logf("checkpoint over ssh: %v (median %v), %d MiB", cpTimes, median(cpTimes), cps[0].Bytes>>20)
	if out := g.must("alice", "checkpoints", name); !strings.Contains(out, cps[0].ID) || !strings.Contains(out, "first") {
		t.Fatalf("checkpoints:\n%s", out)
	}
	var list []fleet.Checkpoint
	if err := json.Unmarshal([]byte(g.must("alice", "checkpoints", "--json", name)), &list); err != nil || len(list) != 3 || list[0].ID != cps[0].ID {
		t.Fatalf("checkpoints --json: %v %+v", err, list)
	}
	// The third goes again; removing it twice is not found.
	if out := g.must("alice", "checkpoints", "rm", name, cps[2].ID); !strings.Contains(out, "removed") {
		t.Fatalf("checkpoints rm: %q", out)
	}
	if r := g.run("alice", "", "checkpoints", "rm", name, cps[2].ID); r.code != 3 {
		t.Fatalf("checkpoints rm of a removed one: exit %d %q", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(g.must("alice", "checkpoints", "--json", name)), &list); err != nil || len(list) != 2 {
		t.Fatalf("checkpoints after rm: %v %+v", err, list)
	}
	sh(name, "rm "+notes+"; echo later > /workspace/widget/later.txt")

	// Rewind: the file is back, the later one gone; the box is done.
	start := time.Now()
	if out := g.must("alice", "rewind", name, cps[0].ID); !strings.Contains(out, "rewound") {
		t.Fatalf("rewind: %q", out)
	}
	t.Logf("rewind over ssh: %v", time.Since(start))
	if got := sh(name, "cat "+notes+"; ls /workspace/widget/later.txt 2>/dev/null || echo no-later"); got != "one\nno-later\n" {
		t.Fatalf("after rewind: %q", got)
	}
	if b := g.waitState("alice", name, fleet.Done); b.Name != name {
		t.Fatalf("rewound box %+v", b)
	}
	// Bad input: each refused with its kind, nothing changed.
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"rewind", name, "cp-nosuch1"}, 3},
		{[]string{"rewind", name, "../../box.json"}, 2},
		{[]string{"rewind", "no-such-box", cps[0].ID}, 3},
		{[]string{"checkpoint", "no-such-box"}, 3},
		{[]string{"fork", "no-such-box"}, 3},
	} {
		if r := g.run("alice", "", tc.args...); r.code != tc.code || !strings.HasPrefix(r.stderr, "error: ") {
			t.Errorf("%v: exit %d %q, want %d", tc.args, r.code, r.stderr, tc.code)
		}
	}
	if r := g.run("bob", "", "fork", name); r.code != 3 {
		t.Errorf("bob forks alice's box: exit %d %q, want not found", r.code, r.stderr)
	}

	// Fork: the new box has the file and its own branch; writes stay apart.
	var forkTimes []time.Duration
	type boxOut struct {
		Name, Owner string
		State       fleet.State
		Repos       []struct{ Name, Branch string }
	}
	var forks []boxOut
	for range 3 {
		start := time.Now()
		var fb boxOut
		if err := json.Unmarshal([]byte(g.must("alice", "fork", "--json", name)), &fb); err != nil || fb.Name == "" || fb.Name == name {
			t.Fatalf("fork --json: %v %+v", err, fb)
		}
		forkTimes = append(forkTimes, time.Since(start))
		forks = append(forks, fb)
		if len(forks) > 1 {
			g.must("alice", "rm", fb.Name)
		}
	}
	t.Logf("fork over ssh: %v (median %v)", forkTimes, median(forkTimes))
	fb := forks[0]
	if fb.Owner != "alice" || len(fb.Repos) != 1 || fb.Repos[0].Branch != "sbx/"+fb.Name || fb.State != fleet.Done {
		t.Fatalf("fork %+v", fb)
	}
	if got := sh(fb.Name, "cat "+notes+"; git -C /workspace/widget rev-parse --abbrev-ref HEAD"); got != "one\nsbx/"+fb.Name+"\n" {
		t.Fatalf("fork: %q, want the file and branch sbx/%s", got, fb.Name)
	}
	if got := sh(name, "git -C /workspace/widget rev-parse --abbrev-ref HEAD"); got != "sbx/"+name+"\n" {
		t.Fatalf("source branch after the fork: %q", got)
	}
	sh(fb.Name, "echo fork > "+notes+"; echo only > /workspace/widget/fork-only.txt")
	if got := sh(name, "cat "+notes+"; ls /workspace/widget/fork-only.txt 2>/dev/null || echo none"); got != "one\nnone\n" {
		t.Fatalf("a write in the fork reached the source: %q", got)
	}
	if out := g.must("alice", "checkpoints", fb.Name); !strings.Contains(out, "no checkpoints") {
		t.Fatalf("the fork lists checkpoints:\n%s", out)
	}

	// A fork with a task runs it.
	out := g.must("alice", "fork", name, `"!say forked and running"`)
	withTask := strings.Fields(out)[1]
	withTask = strings.TrimSuffix(withTask, ":")
	g.waitState("alice", withTask, fleet.Done)
	if logs := g.must("alice", "logs", withTask); !strings.Contains(logs, "forked and running") || !strings.Contains(logs, "forked by alice from "+name) {
		t.Fatalf("logs of the fork with a task:\n%s", logs)
	}

	// Every change is audited; rm removes the fork's checkpoints with it.
	g.must("alice", "checkpoint", fb.Name)
	g.must("alice", "rm", fb.Name)
	g.must("alice", "rm", withTask)
	var rows []struct{ Action, Target, Result string }
	if err := json.Unmarshal([]byte(g.must("root", "audit", "--json", "--limit", "200")), &rows); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range rows {
		if r.Target == name || r.Target == fb.Name {
			actions = append(actions, r.Action)
		}
	}
	for _, want := range []string{"box.checkpoint", "box.checkpoint.rm", "box.rewind", "box.fork"} {
		if !slices.Contains(actions, want) {
			t.Errorf("audit has no %s row (has %v)", want, actions)
		}
	}
	for _, b := range g.vms.List() {
		if b.Name == fb.Name || b.Name == withTask {
			t.Errorf("removed fork %s still has a machine", b.Name)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
