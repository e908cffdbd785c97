package fleet

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// Checkpoints, rewinds and forks of a box: its disks saved beside it, put
// back, or copied into a new box of the caller's. The machines below keep
// the disks (vm.Snapshotter: the QEMU backend); on Kubernetes each call is
// ErrUnavailable, saying why.

// Checkpoint is one saved point of a box's disks.
type Checkpoint struct {
	ID      string    `json:"id"`
	Label   string    `json:"label,omitempty"`
	Created time.Time `json:"created"`
	Bytes   int64     `json:"bytes"`
}

// snapshots is what the machines offer for checkpoints and forks
// (*vm.Manager has it; it answers vm.ErrNoSnapshots when its backend
// keeps none).
type snapshots interface {
	Checkpoint(ctx context.Context, name, label string) (vm.Checkpoint, error)
	Checkpoints(ctx context.Context, name string) ([]vm.Checkpoint, error)
	Rewind(ctx context.Context, name, id string) (vm.Box, error)
	Fork(ctx context.Context, src, id, dst string, spec vm.Spec) (vm.Box, error)
	DeleteCheckpoint(ctx context.Context, name, id string) error
}

var _ snapshots = (*vm.Manager)(nil)

// Checkpoint saves the box's disks (a running box is paused for the copy,
// then goes on) as a new checkpoint with an optional label; a box keeps at
// most vm.MaxCheckpoints. Owner or admin, audited (box.checkpoint), an
// Event.
func (f *Fleet) Checkpoint(ctx context.Context, caller keys.Actor, name, label string) (Checkpoint, error) {
	if err := need(caller, keys.RightWrite, "checkpoint"); err != nil {
		return Checkpoint{}, err
	}
	return f.checkpoint(ctx, caller, name, label)
}

// Checkpoints lists the box's checkpoints, oldest first.
func (f *Fleet) Checkpoints(ctx context.Context, caller keys.Actor, name string) ([]Checkpoint, error) {
	if err := need(caller, keys.RightRead, "checkpoints"); err != nil {
		return nil, err
	}
	return f.checkpoints(ctx, caller, name)
}

// DeleteCheckpoint removes one of the box's checkpoints and its files,
// making room under vm.MaxCheckpoints. Owner or admin, audited
// (box.checkpoint.rm), an Event.
func (f *Fleet) DeleteCheckpoint(ctx context.Context, caller keys.Actor, name, id string) error {
	if err := need(caller, keys.RightWrite, "remove a checkpoint"); err != nil {
		return err
	}
	return f.deleteCheckpoint(ctx, caller, name, id)
}

// Rewind stops the box's machine, puts checkpoint id's disks back and
// cold-boots it: the box keeps its name, record and network grant; a turn
// that was running is lost (the box is done, ready for a follow-up).
// Owner or admin, audited (box.rewind), an Event.
func (f *Fleet) Rewind(ctx context.Context, caller keys.Actor, name, id string) (Box, error) {
	if err := need(caller, keys.RightWrite, "rewind"); err != nil {
		return Box{}, err
	}
	return f.rewind(ctx, caller, name, id)
}

// Fork makes a new box of the caller's from the box's disks as they are
// now: same repos, allow-list, size and agent, each repo on its own new
// branch sbx/NEWNAME from the source's work tree. With a task, the fork
// starts a turn with it (as a follow-up, in the source's conversation).
// Delegate's caps hold (boxes and size per user, per host). Owner or admin
// of the source, audited (box.fork), an Event.
func (f *Fleet) Fork(ctx context.Context, caller keys.Actor, name, task string) (Box, error) {
	if err := need(caller, keys.RightWrite, "fork"); err != nil {
		return Box{}, err
	}
	return f.fork(ctx, caller, name, task)
}

func (f *Fleet) snapshotMachines() (snapshots, error) {
	s, ok := f.vm.(snapshots)
	if !ok {
		return nil, vm.ErrNoSnapshots
	}
	// Refused before anything is made (a fork's record, its network path).
	if c, ok := s.(interface{ CanSnapshot() bool }); ok && !c.CanSnapshot() {
		return nil, vm.ErrNoSnapshots
	}
	return s, nil
}

// snapErr maps the machines' errors for checkpoints, keeping a kind the
// vm layer already gave (a bad label, no such checkpoint, the cap).
func snapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, vm.ErrNotFound) || errors.Is(err, vm.ErrState) || errors.Is(err, vm.ErrLimit) {
		return vmErr(err)
	}
	if errkind.Of(err) != nil {
		return err
	}
	return vmErr(err)
}

// hasMachine refuses a box with no disks to save (being created, failed).
func hasMachine(rec record, op string) error {
	switch rec.State {
	case Running, Waiting, Done, Sleeping:
		return nil
	}
	return fmt.Errorf("box %q is %s: only a running or sleeping box can %s: %w", rec.Name, rec.State, op, ErrConflict)
}

func toCheckpoint(c vm.Checkpoint) Checkpoint {
	return Checkpoint{ID: c.ID, Label: c.Label, Created: c.Created, Bytes: c.Bytes}
}

func (f *Fleet) checkpoint(ctx context.Context, caller keys.Actor, name, label string) (Checkpoint, error) {
	label = strings.TrimSpace(label)
	if err := vm.ValidCheckpointLabel(label); err != nil {
		return Checkpoint{}, f.safeErr(err)
	}
	s, err := f.snapshotMachines()
	if err != nil {
		return Checkpoint{}, err
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Checkpoint{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if err := hasMachine(rec, "be checkpointed"); err != nil {
		return Checkpoint{}, f.safeErr(err)
	}
	e := f.entry(caller, "box.checkpoint", name)
	c, err := s.Checkpoint(ctx, rec.VM, label)
	if err != nil {
		err = snapErr(err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return Checkpoint{}, f.safeErr(err)
	}
	// The agent's conversation as of the checkpoint: a rewind resumes it.
	if rec.CheckpointSessions == nil {
		rec.CheckpointSessions = map[string]string{}
	}
	rec.CheckpointSessions[c.ID] = rec.Session
	e.Detail = c.ID
	if label != "" {
		e.Detail += " " + label
	}
	if err := f.records.save(ctx, rec, e); err != nil {
		return Checkpoint{}, f.safeErr(err)
	}
	f.events.emit(rec, EventState, "box.checkpoint "+c.ID)
	return toCheckpoint(c), nil
}

func (f *Fleet) checkpoints(ctx context.Context, caller keys.Actor, name string) ([]Checkpoint, error) {
	s, err := f.snapshotMachines()
	if err != nil {
		return nil, err
	}
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	if rec.VM == "" {
		return []Checkpoint{}, nil
	}
	list, err := s.Checkpoints(ctx, rec.VM)
	if err != nil {
		return nil, f.safeErr(snapErr(err))
	}
	out := make([]Checkpoint, 0, len(list))
	for _, c := range list {
		out = append(out, toCheckpoint(c))
	}
	return out, nil
}

func (f *Fleet) deleteCheckpoint(ctx context.Context, caller keys.Actor, name, id string) error {
	id = strings.TrimSpace(id)
	if err := vm.ValidCheckpointID(id); err != nil {
		return f.safeErr(err)
	}
	s, err := f.snapshotMachines()
	if err != nil {
		return err
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer lock.Unlock()
	e := f.entry(caller, "box.checkpoint.rm", name)
	e.Detail = id
	if rec.VM == "" {
		err := fmt.Errorf("box %q has no checkpoint %q: %w", name, id, ErrNotFound)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return f.safeErr(err)
	}
	if err := s.DeleteCheckpoint(ctx, rec.VM, id); err != nil {
		err = snapErr(err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return f.safeErr(err)
	}
	delete(rec.CheckpointSessions, id)
	if err := f.records.save(ctx, rec, e); err != nil {
		return f.safeErr(err)
	}
	f.events.emit(rec, EventState, "box.checkpoint.rm "+id)
	return nil
}

func (f *Fleet) rewind(ctx context.Context, caller keys.Actor, name, id string) (Box, error) {
	id = strings.TrimSpace(id)
	if err := vm.ValidCheckpointID(id); err != nil {
		return Box{}, f.safeErr(err)
	}
	s, err := f.snapshotMachines()
	if err != nil {
		return Box{}, err
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if err := hasMachine(rec, "be rewound"); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.runs.stop(rec.Name)
	wasRunning := rec.State == Running
	b, err := s.Rewind(ctx, rec.VM, id)
	if err != nil {
		err = snapErr(err)
		if mb, gerr := f.vm.Get(rec.VM); gerr == nil && mb.State == vm.Failed {
			rec.Reason = mb.Reason
			_ = f.records.transition(context.WithoutCancel(ctx), &rec, Failed, caller, "box.rewind", id+": "+err.Error())
		} else {
			f.audit.Finish(ctx, f.entry(caller, "box.rewind", name), err, audit.ResultError)
			if wasRunning {
				f.runs.follow(rec, nil)
			}
		}
		return Box{}, f.safeErr(err)
	}
	if wasRunning {
		_ = f.logs.append(rec.Name, fmt.Sprintf("── turn %d lost: the box was rewound ──\n", rec.Turn))
	}
	_ = f.logs.append(rec.Name, fmt.Sprintf("── %s rewound the box to checkpoint %s ──\n", caller.User, id))
	rec.TurnDone, rec.Question, rec.SleptAt, rec.StateBeforeSleep = true, "", time.Time{}, ""
	if sess, ok := rec.CheckpointSessions[id]; ok {
		rec.Session = sess
	}
	rec.LastOutput = f.now()
	rec.Deadline = b.Deadline()
	if err := f.records.transition(ctx, &rec, Done, caller, "box.rewind", id); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.events.emit(rec, EventState, "box.rewind "+id)
	v, err := f.view(ctx, rec)
	return v, f.safeErr(err)
}

// forkScript starts the fork's branch in each repo, as the agent user (the
// work tree is theirs): uncommitted changes come along, as checkout -b
// keeps them. $1 is the branch, then pairs of a repo's directory under
// /workspace and its new remote ("-": keep the remote).
const forkScript = `set -e
branch=$1; shift
while [ $# -ge 2 ]; do
  cd "/workspace/$1"
  git checkout --quiet -b "$branch"
  if [ "$2" != - ]; then git remote set-url origin "$2"; fi
  shift 2
done
`

func (f *Fleet) fork(ctx context.Context, caller keys.Actor, name, task string) (Box, error) {
	if strings.TrimSpace(task) != "" {
		t, err := checkText("task", task)
		if err != nil {
			return Box{}, f.safeErr(err)
		}
		task = t
	}
	s, err := f.snapshotMachines()
	if err != nil {
		return Box{}, err
	}
	src, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	srcLocked := true
	defer func() {
		if srcLocked {
			lock.Unlock()
		}
	}()
	if err := hasMachine(src, "be forked"); err != nil {
		return Box{}, f.safeErr(err)
	}
	size, err := f.checkCaps(ctx, caller, DelegateRequest{MemoryMiB: src.MemoryMiB, VCPUs: src.VCPUs})
	if err != nil {
		f.audit.Finish(ctx, f.entry(caller, "box.fork", name), err, "denied")
		return Box{}, f.safeErr(err)
	}
	words := task
	if words == "" {
		words = src.Task
	}
	now := f.now()
	rec := record{
		Name: boxName(words), Owner: caller.User, State: Creating, Agent: src.Agent,
		Task: src.Task, Title: src.Title, Allow: append([]string(nil), src.Allow...), Created: now, Updated: now,
		Turn: src.Turn, TurnDone: true, Session: src.Session, Summary: src.Summary,
	}
	if task != "" {
		rec.Task, rec.Title = task, DefaultTitle(task)
	}
	for _, r := range src.Repos {
		r.Branch = "sbx/" + rec.Name
		r.Push = true
		rec.Repos = append(rec.Repos, r)
	}
	nlock := f.locks.get(rec.Name)
	nlock.Lock()
	defer nlock.Unlock()
	d, err := doc(rec)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	e := f.entry(caller, "box.fork", rec.Name)
	e.Detail = "from " + src.Name
	if err := f.store.InsertBox(ctx, d, e); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	f.events.emit(rec, EventState, "box.fork "+src.Name)
	fail := func(err error) (Box, error) {
		rec.Reason = err.Error()
		_ = f.records.transition(context.WithoutCancel(ctx), &rec, Failed, caller, "box.fail", rec.Reason)
		return Box{}, f.safeErr(err)
	}
	t0 := time.Now()
	// Named before the machine exists: rm of a fork that failed here
	// detaches its network path too.
	rec.VM = rec.Name
	spec, err := f.pool.spec(ctx, rec.Name)
	if err != nil {
		return fail(err)
	}
	spec.MemoryMiB, spec.VCPUs = size.memMiB, size.vcpus
	mb, err := s.Fork(ctx, src.VM, "", rec.Name, spec)
	lock.Unlock()
	srcLocked = false
	if err != nil {
		if _, gerr := f.vm.Get(rec.Name); gerr == nil {
			_ = f.vm.Destroy(context.WithoutCancel(ctx), rec.Name)
		}
		return fail(snapErr(err))
	}
	booted := time.Since(t0)
	rec.Started = f.now()
	rec.Deadline = mb.Deadline()
	rec.MemoryMiB, rec.VCPUs = mb.Spec.MemoryMiB, mb.Spec.VCPUs
	if err := f.records.save(ctx, rec, audit.Entry{}); err != nil {
		return fail(err)
	}
	if len(rec.Repos) > 0 {
		argv := []string{"/bin/sh", "-c", forkScript, "fork", "sbx/" + rec.Name}
		for _, r := range rec.Repos {
			remote := "-"
			if f.net != nil {
				remote = gitRemote(rec.VM, r.Name)
			}
			argv = append(argv, path.Clean(r.Dir), remote)
		}
		if out, err := run(ctx, f.vm, rec.VM, agent.ExecRequest{User: agent.AgentUser, Argv: argv}); err != nil {
			return fail(fmt.Errorf("start the fork's branch: %w: %s", err, out))
		}
	}
	_ = f.logs.append(rec.Name, fmt.Sprintf("── forked by %s from %s (turn %d); branch sbx/%s ──\n", caller.User, src.Name, src.Turn, rec.Name))
	if task != "" {
		if err := f.vm.WriteFile(ctx, rec.VM, ".agent.task", 0o644, strings.NewReader(task+"\n")); err != nil {
			return fail(fmt.Errorf("write the task: %w", err))
		}
		if err := f.runs.startTurn(ctx, &rec, task, caller, "box.followup"); err != nil {
			return fail(err)
		}
	} else if err := f.records.transition(ctx, &rec, Done, caller, "", ""); err != nil {
		return fail(err)
	}
	f.log.Info("forked", "box", rec.Name, "from", src.Name, "machine", booted.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}
