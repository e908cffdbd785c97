package vmtest

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// checkpoints checks Checkpoint, Rewind and Fork on the running box, or,
// for a backend that keeps none, that each says so (errkind.Unavailable).
func checkpoints(ctx context.Context, t *testing.T, m *vm.Manager, box string, spec vm.Spec, s Setup) {
	const fork = "conf-fork"
	if !m.CanSnapshot() {
		_, err := m.Checkpoint(ctx, box, "x")
		if !errors.Is(err, errkind.Unavailable) || !strings.Contains(err.Error(), "QEMU backend") {
			t.Fatalf("Checkpoint on a backend without snapshots: %v, want unavailable naming the QEMU backend", err)
		}
		if _, err := m.Fork(ctx, box, "", fork, spec); !errors.Is(err, errkind.Unavailable) {
			t.Fatalf("Fork on a backend without snapshots: %v, want unavailable", err)
		}
		if _, err := m.Rewind(ctx, box, "cp-abcdefgh"); !errors.Is(err, errkind.Unavailable) {
			t.Fatalf("Rewind on a backend without snapshots: %v, want unavailable", err)
		}
		if err := m.DeleteCheckpoint(ctx, box, "cp-abcdefgh"); !errors.Is(err, errkind.Unavailable) {
			t.Fatalf("DeleteCheckpoint on a backend without snapshots: %v, want unavailable", err)
		}
		if _, err := m.Get(fork); !errors.Is(err, vm.ErrNotFound) {
			t.Fatalf("a refused fork exists: %v", err)
		}
		return
	}
	sh := func(name, script string) string {
		t.Helper()
		return run(ctx, t, m, name, agent.ExecRequest{Argv: []string{"sh", "-c", script}}, nil).stdout
	}

	// Bad input is refused before anything happens.
	for _, name := range []string{"", "..", "../x", "a/b"} {
		if _, err := m.Checkpoint(ctx, name, ""); err == nil || errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Checkpoint(%q) = %v, want a name error", name, err)
		}
		if _, err := m.Fork(ctx, box, "", name, spec); err == nil || errors.Is(err, vm.ErrNotFound) {
			t.Errorf("Fork into %q = %v, want a name error", name, err)
		}
	}
	for _, label := range []string{"two\nlines", "nul\x00", strings.Repeat("x", vm.MaxCheckpointLabel+1), "\xff"} {
		if _, err := m.Checkpoint(ctx, box, label); !errors.Is(err, errkind.Invalid) {
			t.Errorf("Checkpoint label %q = %v, want invalid", label, err)
		}
	}
	for _, id := range []string{"", "..", "../../box.json", "cp-../x", "cp-a", "cp-" + strings.Repeat("a", 33), "cp-ab cd"} {
		if _, err := m.Rewind(ctx, box, id); !errors.Is(err, errkind.Invalid) {
			t.Errorf("Rewind to %q = %v, want invalid", id, err)
		}
	}
	if _, err := m.Rewind(ctx, box, "cp-abcdefgh"); !errors.Is(err, vm.ErrNoCheckpoint) {
		t.Errorf("Rewind to a checkpoint the box lacks: %v, want not found", err)
	}
	if _, err := m.Fork(ctx, box, "", box, spec); !errors.Is(err, errkind.Invalid) {
		t.Errorf("Fork into its own name: %v, want invalid", err)
	}
	if b, _ := m.Get(box); b.State != vm.Running {
		t.Fatalf("refused calls changed the box: %+v", b)
	}

	// Checkpoint, change, rewind: the file is back.
	sh(box, "echo one > /workspace/cp.txt")
	start := time.Now()
	cp1, err := m.Checkpoint(ctx, box, "first one")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of a running box: %v (%d KiB)", time.Since(start), cp1.Bytes>>10)
	if cp1.Label != "first one" || vm.ValidCheckpointID(cp1.ID) != nil {
		t.Fatalf("checkpoint %+v", cp1)
	}
	sh(box, "echo two > /workspace/cp.txt; echo new > /workspace/later.txt")
	cp2, err := m.Checkpoint(ctx, box, "")
	if err != nil {
		t.Fatal(err)
	}
	sh(box, "rm /workspace/cp.txt")
	start = time.Now()
	b, err := m.Rewind(ctx, box, cp1.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rewind to agent reply: %v (%s)", time.Since(start), b.Reason)
	if b.State != vm.Running || !strings.Contains(b.Reason, cp1.ID) {
		t.Fatalf("after Rewind: %+v", b)
	}
	if got := sh(box, "cat /workspace/cp.txt; ls /workspace/later.txt 2>/dev/null || echo no-later"); got != "one\nno-later\n" {
		t.Fatalf("after rewinding to %s: %q, want the file as it was", cp1.ID, got)
	}
	if _, err := m.Rewind(ctx, box, cp2.ID); err != nil {
		t.Fatal(err)
	}
	if got := sh(box, "cat /workspace/cp.txt /workspace/later.txt"); got != "two\nnew\n" {
		t.Fatalf("after rewinding to %s: %q", cp2.ID, got)
	}

	// A sleeping box is checkpointed as it sleeps.
	if _, err := m.Sleep(ctx, box); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Checkpoint(ctx, box, "asleep"); err != nil {
		t.Fatalf("checkpoint a sleeping box: %v", err)
	}
	if b, _ := m.Get(box); b.State != vm.Sleeping {
		t.Fatalf("checkpoint woke the box: %+v", b)
	}
	if _, err := m.Wake(ctx, box); err != nil {
		t.Fatal(err)
	}

	list, err := m.Checkpoints(ctx, box)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	if len(list) != 3 || list[0].ID != cp1.ID || list[1].ID != cp2.ID || list[2].Label != "asleep" ||
		!sort.SliceIsSorted(list, func(i, j int) bool { return list[i].Created.Before(list[j].Created) }) {
		t.Fatalf("checkpoints %v, want %s %s and the sleeping one, oldest first", ids, cp1.ID, cp2.ID)
	}

	// The per-box cap.
	for len(list) < vm.MaxCheckpoints {
		c, err := m.Checkpoint(ctx, box, "filler")
		if err != nil {
			t.Fatal(err)
		}
		list = append(list, c)
	}
	if _, err := m.Checkpoint(ctx, box, "one too many"); !errors.Is(err, errkind.Limit) {
		t.Fatalf("checkpoint %d: %v, want limit", vm.MaxCheckpoints+1, err)
	}
	// Removing one makes room; its files go.
	if err := m.DeleteCheckpoint(ctx, box, list[len(list)-1].ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteCheckpoint(ctx, box, list[len(list)-1].ID); !errors.Is(err, vm.ErrNoCheckpoint) {
		t.Fatalf("removing a removed checkpoint: %v, want not found", err)
	}
	if err := m.DeleteCheckpoint(ctx, box, "../../box.json"); !errors.Is(err, errkind.Invalid) {
		t.Fatalf("removing checkpoint ../../box.json: %v, want invalid", err)
	}
	if got, err := m.Checkpoints(ctx, box); err != nil || len(got) != vm.MaxCheckpoints-1 {
		t.Fatalf("after removing one: %d checkpoints (%v)", len(got), err)
	}
	if _, err := m.Checkpoint(ctx, box, "room again"); err != nil {
		t.Fatalf("checkpoint after removing one: %v", err)
	}

	// Fork the box as it is: the fork has the files, and each box's writes
	// are its own.
	sh(box, "echo src > /workspace/fork.txt")
	start = time.Now()
	fb, err := m.Fork(ctx, box, "", fork, vm.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork to agent reply: %v", time.Since(start))
	if fb.State != vm.Running || fb.Name != fork || fb.Spec.MemoryMiB != spec.MemoryMiB {
		t.Fatalf("fork %+v", fb)
	}
	if got := sh(fork, "cat /workspace/fork.txt /workspace/cp.txt"); got != "src\ntwo\n" {
		t.Fatalf("fork sees %q, want the source's files", got)
	}
	sh(fork, "echo fork > /workspace/fork.txt; echo only > /workspace/fork-only.txt")
	sh(box, "echo src2 > /workspace/cp.txt")
	if got := sh(box, "cat /workspace/fork.txt; ls /workspace/fork-only.txt 2>/dev/null || echo none"); got != "src\nnone\n" {
		t.Fatalf("a write in the fork reached the source: %q", got)
	}
	if got := sh(fork, "cat /workspace/cp.txt"); got != "two\n" {
		t.Fatalf("a write in the source reached the fork: %q", got)
	}
	if fl, err := m.Checkpoints(ctx, fork); err != nil || len(fl) != 0 {
		t.Fatalf("the fork has checkpoints %v (%v), want none of the source's", fl, err)
	}
	if _, err := m.Fork(ctx, box, "", fork, spec); !errors.Is(err, vm.ErrExists) {
		t.Fatalf("fork onto an existing box: %v, want exists", err)
	}
	if _, err := m.Fork(ctx, box, "", "conf-fork2", spec); !errors.Is(err, vm.ErrLimit) {
		t.Fatalf("fork past the box cap: %v, want limit", err)
	}
	if err := m.Destroy(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if left := s.Leftovers(t, fork); len(left) > 0 {
		t.Fatalf("destroying the fork left %v", left)
	}

	// Fork from a checkpoint.
	fb, err = m.Fork(ctx, box, cp1.ID, fork, vm.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(fork, "cat /workspace/cp.txt; ls /workspace/fork.txt 2>/dev/null || echo none"); got != "one\nnone\n" {
		t.Fatalf("fork of %s sees %q", cp1.ID, got)
	}
	if err := m.Destroy(ctx, fork); err != nil {
		t.Fatal(err)
	}
	if left := s.Leftovers(t, fork); len(left) > 0 {
		t.Fatalf("destroying the fork left %v", left)
	}
	if slices.ContainsFunc(m.List(), func(b vm.Box) bool { return b.Name == fork }) {
		t.Fatal("destroyed fork still listed")
	}
}
