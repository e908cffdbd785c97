package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/internal/errkind"
)

// TestSnapshotsUnavailableWithoutDisks: machines that keep no disks of
// their own (a Pod's, here the core without machines) answer every
// checkpoint, rewind and fork call unavailable, saying why, and make
// nothing: no box record, no audit row of a change. The real calls run in
// sshd's TestCheckpointRewindFork and the vm conformance suite.
func TestSnapshotsUnavailableWithoutDisks(t *testing.T) {
	h := fleettest.New(t, fleettest.Options{NoMachines: true, NoAccount: true})
	ctx := context.Background()
	alice := h.Actors["alice"]
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "QEMU backend") || !strings.Contains(err.Error(), "Pod") {
			t.Errorf("%s: %v, want unavailable naming the QEMU backend and why a Pod's disk is not", what, err)
		}
	}
	_, err := h.Fleet.Checkpoint(ctx, alice, "some-box", "label")
	check("Checkpoint", err)
	_, err = h.Fleet.Checkpoints(ctx, alice, "some-box")
	check("Checkpoints", err)
	_, err = h.Fleet.Rewind(ctx, alice, "some-box", "cp-abcdefgh")
	check("Rewind", err)
	_, err = h.Fleet.Fork(ctx, alice, "some-box", "try again")
	check("Fork", err)
	if boxes, err := h.Fleet.List(ctx, alice); err != nil || len(boxes) != 0 {
		t.Fatalf("refused calls made boxes: %v %v", boxes, err)
	}
	// Bad input is still said as such first.
	if _, err := h.Fleet.Rewind(ctx, alice, "some-box", "../../box.json"); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("Rewind to a bad id: %v, want invalid", err)
	}
	if _, err := h.Fleet.Checkpoint(ctx, alice, "some-box", "two\nlines"); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("Checkpoint with a bad label: %v, want invalid", err)
	}
}
