package fleet_test

import (
	"errors"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
)

// TestSetupStep: the operator's setup script runs as root after the repos
// are copied in and before the agent, its output in the box's log; what it
// leaves in the workspace is the agent's; the agent itself stays
// unprivileged. A failing script fails the box with its exit status; bad
// scripts are refused before anything starts.
func TestSetupStep(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	b, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say agent here\n!sleep 120", Agent: "script",
		Repos: []fleet.RepoSpec{{Repo: "acme/widget"}},
		Setup: "echo installing\nid -u > /etc/setup-ran\ntest -f /workspace/widget/README.md\nmkdir -p /workspace/tools && echo t > /workspace/tools/t\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	log := e.waitLog(b.Name, "agent here")
	iSetup, iDone, iAgent := strings.Index(log, "── setup · root ──"), strings.Index(log, "── setup done ──"), strings.Index(log, "agent here")
	if iSetup < 0 || !strings.Contains(log, "installing") || iDone < iSetup || iAgent < iDone {
		t.Errorf("the setup step is not in the log before the agent:\n%s", log)
	}
	if out, _ := e.execOut(t, e.alice, b.Name, "", "cat", "/etc/setup-ran"); strings.TrimSpace(out) != "0" {
		t.Errorf("setup ran as uid %q, want 0", out)
	}
	if out, _ := e.execOut(t, e.alice, b.Name, "", "stat", "-c", "%u", "/workspace/tools", "/workspace/tools/t"); out != "1000\n1000\n" {
		t.Errorf("what setup left in the workspace is owned by %q, want the agent user", out)
	}

	// A failing script fails the box, saying so.
	_, err = e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say never", Agent: "script", Setup: "echo about to fail\nfalse\necho not reached",
	})
	if err == nil || !strings.Contains(err.Error(), "setup step exited 1") {
		t.Errorf("a failing setup: %v", err)
	}
	boxes, _ := e.fleet.List(e.ctx(), e.alice)
	failed := 0
	for _, x := range boxes {
		if x.State == fleet.Failed && strings.Contains(x.Reason.String(), "setup step exited 1") {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("want one failed box with the setup's exit: %+v", boxes)
	}

	// Refused before anything starts.
	for _, bad := range []string{"echo a\x00b", strings.Repeat("x", fleet.MaxSetupBytes+1), "\xff\xfe"} {
		if _, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{Task: "!say x", Agent: "script", Setup: bad}); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("setup %.20q: %v, want ErrInvalid", bad, err)
		}
	}
}
