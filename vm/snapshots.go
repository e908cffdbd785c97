package vm

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/vm/agent"
)

// Checkpoints, rewinds and forks: a point of a box's disks kept beside it,
// put back later, or copied into a new box. They are disk only: a rewind
// and a fork cold-boot on the saved disks (the guest's processes are not
// kept), which every backend that has disks of its own can do.

// MaxCheckpoints caps the checkpoints one box keeps.
const MaxCheckpoints = 8

// MaxCheckpointLabel caps a checkpoint's label, in bytes.
const MaxCheckpointLabel = 200

// Checkpoint is one saved point of a box's disks.
type Checkpoint struct {
	ID      string    `json:"id"`              // "cp-<random>", unique in the box
	Label   string    `json:"label,omitempty"` // the caller's words
	Created time.Time `json:"created"`
	// Bytes is the space the checkpoint's files take on the host.
	Bytes int64 `json:"bytes"`
}

// Snapshotter is a Driver that keeps checkpoints of a box's disks and
// copies them into new boxes. The QEMU backend is one; a Kubernetes Pod's
// disk is not the backend's to copy, so that backend is not.
type Snapshotter interface {
	// SaveCheckpoint copies the box's disks to checkpoint cp (the
	// Manager chose its ID), pausing a running machine for the copy.
	SaveCheckpoint(ctx context.Context, name string, cp Checkpoint) (Checkpoint, error)
	// Checkpoints lists the box's checkpoints, in no order.
	Checkpoints(ctx context.Context, name string) ([]Checkpoint, error)
	// Restore puts checkpoint id's disks back as the box's. The box's
	// machine is stopped; its memory snapshot, if any, is dropped.
	Restore(ctx context.Context, name, id string) error
	// DeleteCheckpoint removes checkpoint id and its files.
	DeleteCheckpoint(ctx context.Context, name, id string) error
	// Fork provisions box dst (not running yet, like Create) with a copy
	// of src's disks, as they are now (id "", pausing a running machine
	// for the copy) or at checkpoint id. dst shares no file with src.
	Fork(ctx context.Context, src, id string, dst Box) error
}

// ErrNoSnapshots is the answer of a Manager whose backend keeps no
// checkpoints.
var ErrNoSnapshots = errkind.New(errkind.Unavailable,
	"checkpoints and forks need the QEMU backend: a Pod's disk is the cluster's volume, not a file this gateway can copy or put back")

// ErrNoCheckpoint is returned for a checkpoint id the box does not have.
var ErrNoCheckpoint = errkind.New(errkind.NotFound, "checkpoint not found")

func (m *Manager) snapshotter() (Snapshotter, error) {
	s, ok := m.backend.(Snapshotter)
	if !ok {
		return nil, ErrNoSnapshots
	}
	return s, nil
}

// CanSnapshot reports whether the backend keeps checkpoints and forks.
func (m *Manager) CanSnapshot() bool {
	_, ok := m.backend.(Snapshotter)
	return ok
}

// ValidCheckpointLabel checks a checkpoint's label: at most
// MaxCheckpointLabel bytes of printable UTF-8 on one line ("" is allowed).
func ValidCheckpointLabel(label string) error {
	if len(label) > MaxCheckpointLabel {
		return fmt.Errorf("checkpoint label is %d bytes (max %d): %w", len(label), MaxCheckpointLabel, errkind.Invalid)
	}
	if !utf8.ValidString(label) || strings.IndexFunc(label, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("checkpoint label %q: only printable text on one line: %w", label, errkind.Invalid)
	}
	return nil
}

// ValidCheckpointID checks a checkpoint id's shape (it names a directory).
func ValidCheckpointID(id string) error {
	rest, ok := strings.CutPrefix(id, "cp-")
	if !ok || len(rest) < 4 || len(rest) > 32 || strings.IndexFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0 {
		return fmt.Errorf("checkpoint %q: want an id like cp-ab12cd34 (see checkpoints BOX): %w", id, errkind.Invalid)
	}
	return nil
}

// syncGuest asks a running box's guest to write its caches to disk, so a
// copy of the disks holds what the guest has written.
func (m *Manager) syncGuest(ctx context.Context, name string) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := m.Exec(sctx, name, agent.ExecRequest{Argv: []string{"sync"}})
	if err != nil {
		return fmt.Errorf("sync the guest's disks: %w", err)
	}
	p.Stdin().Close()
	st, err := p.Wait()
	if err != nil {
		return fmt.Errorf("sync the guest's disks: %w", err)
	}
	if st.Code != 0 {
		return fmt.Errorf("sync the guest's disks: exit %d", st.Code)
	}
	return nil
}

// Checkpoint saves the disks of a running or sleeping box as a new
// checkpoint with label (at most MaxCheckpoints per box).
func (m *Manager) Checkpoint(ctx context.Context, name, label string) (Checkpoint, error) {
	label = strings.TrimSpace(label)
	if err := ValidName(name); err != nil {
		return Checkpoint{}, err
	}
	if err := ValidCheckpointLabel(label); err != nil {
		return Checkpoint{}, err
	}
	s, err := m.snapshotter()
	if err != nil {
		return Checkpoint{}, err
	}
	if b, err := m.Get(name); err == nil && b.State == Running {
		if err := m.syncGuest(ctx, name); err != nil {
			return Checkpoint{}, fmt.Errorf("checkpoint box %q: %w", name, err)
		}
	}
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Checkpoint{}, err
	}
	defer e.op.Unlock()
	if box.State != Running && box.State != Sleeping {
		return Checkpoint{}, fmt.Errorf("checkpoint box %q: %w: it is %s", name, ErrState, box.State)
	}
	have, err := s.Checkpoints(ctx, name)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint box %q: %w", name, err)
	}
	if len(have) >= MaxCheckpoints {
		return Checkpoint{}, fmt.Errorf("box %q has %d checkpoints, the most a box keeps: %w", name, len(have), errkind.Limit)
	}
	cp := Checkpoint{ID: "cp-" + strings.ToLower(rand.Text()[:8]), Label: label, Created: time.Now().UTC()}
	cp, err = s.SaveCheckpoint(ctx, name, cp)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint box %q: %w", name, err)
	}
	m.log.Info("box checkpoint", "box", name, "checkpoint", cp.ID, "bytes", cp.Bytes)
	return cp, nil
}

// Checkpoints lists a box's checkpoints, oldest first.
func (m *Manager) Checkpoints(ctx context.Context, name string) ([]Checkpoint, error) {
	if _, err := m.Get(name); err != nil {
		return nil, err
	}
	s, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	out, err := s.Checkpoints(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("checkpoints of box %q: %w", name, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Rewind stops a running or sleeping box's machine, puts checkpoint id's
// disks back and cold-boots the box on them. The box keeps its name, its
// record (first start, deadline) and its network path.
func (m *Manager) Rewind(ctx context.Context, name, id string) (Box, error) {
	if err := ValidCheckpointID(id); err != nil {
		return Box{}, err
	}
	s, err := m.snapshotter()
	if err != nil {
		return Box{}, err
	}
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if box.State != Running && box.State != Sleeping {
		return Box{}, fmt.Errorf("rewind box %q: %w: it is %s", name, ErrState, box.State)
	}
	if dl := box.Deadline(); !dl.IsZero() && time.Now().After(dl) {
		return Box{}, fmt.Errorf("rewind box %q: %w: max duration %v is over", name, ErrState, box.Spec.MaxDuration)
	}
	if err := m.hasCheckpoint(ctx, s, name, id); err != nil {
		return Box{}, err
	}
	m.dropClient(e)
	if err := m.backend.Kill(ctx, name); err != nil {
		return m.save(box, Failed, "rewind: stop: "+err.Error()), fmt.Errorf("rewind box %q: %w", name, err)
	}
	if err := s.Restore(ctx, name, id); err != nil {
		return m.save(box, Failed, "rewind: restore "+id+": "+err.Error()), fmt.Errorf("rewind box %q: %w", name, err)
	}
	launch := func(ctx context.Context) error { return m.backend.Start(ctx, name) }
	if box, err = m.boot(ctx, "rewind", box, m.bootSteps(e, name, "rewind", launch, "boot")); err != nil {
		return box, err
	}
	return m.save(box, Running, "rewound to checkpoint "+id+" (cold boot)"), nil
}

// DeleteCheckpoint removes one of a box's checkpoints (its files go at
// once), making room under MaxCheckpoints.
func (m *Manager) DeleteCheckpoint(ctx context.Context, name, id string) error {
	if err := ValidCheckpointID(id); err != nil {
		return err
	}
	s, err := m.snapshotter()
	if err != nil {
		return err
	}
	e, _, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	if err := m.hasCheckpoint(ctx, s, name, id); err != nil {
		return err
	}
	if err := s.DeleteCheckpoint(ctx, name, id); err != nil {
		return fmt.Errorf("box %q: remove checkpoint %s: %w", name, id, err)
	}
	m.log.Info("box checkpoint removed", "box", name, "checkpoint", id)
	return nil
}

func (m *Manager) hasCheckpoint(ctx context.Context, s Snapshotter, name, id string) error {
	have, err := s.Checkpoints(ctx, name)
	if err != nil {
		return fmt.Errorf("checkpoints of box %q: %w", name, err)
	}
	for _, c := range have {
		if c.ID == id {
			return nil
		}
	}
	return fmt.Errorf("box %q has no checkpoint %q (see its checkpoints): %w", name, id, ErrNoCheckpoint)
}

// Fork makes box dst from src's disks, as they are now (id "") or at
// checkpoint id, and cold-boots it. dst takes src's spec with spec's
// non-zero sizes and its Egress (its own network path: never src's). src
// must be running or sleeping; dst counts against the host caps.
func (m *Manager) Fork(ctx context.Context, src, id, dst string, spec Spec) (Box, error) {
	if err := ValidName(dst); err != nil {
		return Box{}, err
	}
	if err := ValidName(src); err != nil {
		return Box{}, err
	}
	if src == dst {
		return Box{}, fmt.Errorf("fork box %q: the new box needs its own name: %w", src, errkind.Invalid)
	}
	if id != "" {
		if err := ValidCheckpointID(id); err != nil {
			return Box{}, err
		}
	}
	if spec.Egress != "" {
		if err := ValidEgress(spec.Egress); err != nil {
			return Box{}, fmt.Errorf("box %q: %w", dst, err)
		}
	}
	s, err := m.snapshotter()
	if err != nil {
		return Box{}, err
	}
	if b, err := m.Get(src); err == nil && b.State == Running && id == "" {
		if err := m.syncGuest(ctx, src); err != nil {
			return Box{}, fmt.Errorf("fork box %q: %w", src, err)
		}
	}
	se, sbox, err := m.lock(ctx, src)
	if err != nil {
		return Box{}, err
	}
	if sbox.State != Running && sbox.State != Sleeping {
		se.op.Unlock()
		return Box{}, fmt.Errorf("fork box %q: %w: it is %s", src, ErrState, sbox.State)
	}
	if id != "" {
		if err := m.hasCheckpoint(ctx, s, src, id); err != nil {
			se.op.Unlock()
			return Box{}, err
		}
	}
	ns := sbox.Spec
	ns.Egress = spec.Egress
	if spec.MemoryMiB > 0 {
		ns.MemoryMiB = spec.MemoryMiB
	}
	if spec.VCPUs > 0 {
		ns.VCPUs = spec.VCPUs
	}
	if spec.MaxDuration > 0 {
		ns.MaxDuration = spec.MaxDuration
	}
	if err := ns.CheckSize(dst); err != nil {
		se.op.Unlock()
		return Box{}, err
	}
	now := time.Now().UTC()
	nb := Box{Name: dst, Spec: ns, State: Creating, Created: now, Updated: now}
	m.mu.Lock()
	de := m.entryLocked(dst)
	if _, ok := m.records.Get(dst); ok || de.creating > 0 {
		m.mu.Unlock()
		se.op.Unlock()
		return Box{}, fmt.Errorf("box %q: %w", dst, ErrExists)
	}
	if err := m.checkCapsLocked(ns.MemoryMiB); err != nil {
		m.mu.Unlock()
		se.op.Unlock()
		return Box{}, fmt.Errorf("box %q refused: %w", dst, err)
	}
	de.creating = ns.MemoryMiB
	m.mu.Unlock()
	de.op.Lock()
	err = s.Fork(ctx, src, id, nb)
	se.op.Unlock()
	m.mu.Lock()
	if err == nil {
		m.records.Created(nb)
	}
	de.creating = 0
	m.mu.Unlock()
	de.op.Unlock()
	if err != nil {
		return Box{}, fmt.Errorf("fork box %q into %q: %w", src, dst, err)
	}
	m.log.Info("box forked", "box", dst, "from", src, "checkpoint", id)
	return m.Start(ctx, dst)
}
