package fleet_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
)

// TestRegressionFailedStartLeavesMachineRunning: a box whose start failed
// at a step (here the setup script; the profile's install is the same
// path) kept its QEMU machine running though a failed box counts for no
// size, so failed starts piled up machines until each one's deadline
// (found by TestProfileDependencyInstallColdAndFork). The machine ends with
// the failure; the log stays readable and rm still removes the box.
func TestRegressionFailedStartLeavesMachineRunning(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	_, err := e.fleet.Delegate(e.ctx(), e.alice, fleet.DelegateRequest{
		Task: "!say never", Agent: "script", Setup: "echo about to fail\nexit 4",
	})
	if err == nil || !strings.Contains(err.Error(), "setup step exited 4") {
		t.Fatalf("a failing setup: %v", err)
	}
	boxes, err := e.fleet.List(e.ctx(), e.alice)
	if err != nil || len(boxes) != 1 || boxes[0].State != fleet.Failed {
		t.Fatalf("boxes: %+v %v", boxes, err)
	}
	name := boxes[0].Name
	if ms := e.vm.List(); len(ms) != 0 {
		t.Errorf("machines after the failed start of %s: %+v", name, ms)
	}
	st, err := e.fleet.Logs(e.ctx(), e.alice, name, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if log, _ := io.ReadAll(st); !strings.Contains(string(log), "about to fail") || !strings.Contains(string(log), "── setup exited 4 ──") {
		t.Errorf("the failed box's log:\n%s", log)
	}
	if err := e.fleet.Destroy(e.ctx(), e.alice, name); err != nil {
		t.Fatalf("rm of the failed box: %v", err)
	}
	if _, err := e.fleet.Get(e.ctx(), e.alice, name); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("after rm: %v", err)
	}
}
