package fleet

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

// The smallest and largest sizes any box may ask for, whatever the caps
// (what a machine can run at all, vm.Spec.CheckSize).
const (
	MinBoxMemoryMiB = 64
	MaxBoxVCPUs     = 64
)

// ParseMemory reads a box's memory in MiB as a front got it ("768"); ""
// is 0, the default size. Fronts parse with it so every front says the
// same about a bad number.
func ParseMemory(s string) (int, error) {
	return parseSize(s, "memory", "MiB, e.g. 1024")
}

// ParseCPUs reads a box's vCPU count as a front got it ("2"); "" is 0, the
// default.
func ParseCPUs(s string) (int, error) {
	return parseSize(s, "cpus", "vCPUs, e.g. 2")
}

func parseSize(s, what, want string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive whole number of %s: %w", what, s, want, ErrInvalid)
	}
	return n, nil
}

// ParseExtension reads how far to push a box's deadline out ("30m", "2h",
// "1h30m").
func ParseExtension(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("duration %q: want a positive duration such as 30m, 2h or 1h30m: %w", s, ErrInvalid)
	}
	return d, nil
}

// boxSize is a box's memory and vCPUs.
type boxSize struct{ memMiB, vcpus int }

// checkSize is the size a delegation gets: the request's, each zero field
// the policy's default, within the caps per box (Policy.MaxBoxMemoryMiB,
// MaxBoxVCPUs) and per user (MaxUserMemoryMiB, MaxUserVCPUs, over the
// caller's live boxes, used). A size no machine runs is ErrInvalid; one
// over a cap ErrLimit, naming the cap's configuration key.
func checkSize(p Policy, req DelegateRequest, used boxSize) (boxSize, error) {
	if req.MemoryMiB < 0 {
		return boxSize{}, fmt.Errorf("memory %d MiB: must be positive: %w", req.MemoryMiB, ErrInvalid)
	}
	if req.VCPUs < 0 {
		return boxSize{}, fmt.Errorf("cpus %d: must be positive: %w", req.VCPUs, ErrInvalid)
	}
	s := boxSize{req.MemoryMiB, req.VCPUs}
	def := p.Spec.WithDefaults(vm.BuiltinDefaults())
	if s.memMiB == 0 {
		s.memMiB = def.MemoryMiB
	}
	if s.vcpus == 0 {
		s.vcpus = def.VCPUs
	}
	switch {
	case s.memMiB < MinBoxMemoryMiB:
		return boxSize{}, fmt.Errorf("memory %d MiB: a box needs at least %d MiB: %w", s.memMiB, MinBoxMemoryMiB, ErrInvalid)
	case s.vcpus > MaxBoxVCPUs:
		return boxSize{}, fmt.Errorf("cpus %d: a box has at most %d vCPUs: %w", s.vcpus, MaxBoxVCPUs, ErrInvalid)
	case req.MemoryMiB > 0 && p.MaxBoxMemoryMiB > 0 && s.memMiB > p.MaxBoxMemoryMiB:
		return boxSize{}, fmt.Errorf("memory %d MiB is over the most a box may have, %d MiB (box.max_memory_mib): %w", s.memMiB, p.MaxBoxMemoryMiB, ErrLimit)
	case req.VCPUs > 0 && p.MaxBoxVCPUs > 0 && s.vcpus > p.MaxBoxVCPUs:
		return boxSize{}, fmt.Errorf("cpus %d is over the most a box may have, %d (box.max_cpus): %w", s.vcpus, p.MaxBoxVCPUs, ErrLimit)
	case p.MaxUserMemoryMiB > 0 && used.memMiB+s.memMiB > p.MaxUserMemoryMiB:
		return boxSize{}, fmt.Errorf("memory %d MiB: your boxes already have %d MiB of the %d MiB a user may have (box.max_user_memory_mib); ask for less or remove a box: %w",
			s.memMiB, used.memMiB, p.MaxUserMemoryMiB, ErrLimit)
	case p.MaxUserVCPUs > 0 && used.vcpus+s.vcpus > p.MaxUserVCPUs:
		return boxSize{}, fmt.Errorf("cpus %d: your boxes already have %d of the %d vCPUs a user may have (box.max_user_cpus); ask for fewer or remove a box: %w",
			s.vcpus, used.vcpus, p.MaxUserVCPUs, ErrLimit)
	}
	return s, nil
}

// sizeOf is a record's size; records from before sizes were kept have the
// policy's default.
func sizeOf(p Policy, rec record) boxSize {
	def := p.Spec.WithDefaults(vm.BuiltinDefaults())
	s := boxSize{rec.MemoryMiB, rec.VCPUs}
	if s.memMiB <= 0 {
		s.memMiB = def.MemoryMiB
	}
	if s.vcpus <= 0 {
		s.vcpus = def.VCPUs
	}
	return s
}

// checkLifetime says whether a box whose machine first started at started
// may have its deadline at until (Policy.MaxLifetime, from that start).
func checkLifetime(p Policy, name string, started, deadline, until time.Time) error {
	if p.MaxLifetime <= 0 {
		return nil
	}
	limit := started.Add(p.MaxLifetime)
	if until.After(limit) {
		left := limit.Sub(deadline).Truncate(time.Minute)
		if left <= 0 {
			return fmt.Errorf("box %q already lives as long as a box may (box.max_lifetime=%v from its start): %w", name, p.MaxLifetime, ErrLimit)
		}
		return fmt.Errorf("box %q would live %v, more than a box may (box.max_lifetime=%v from its start); it can be extended by at most %v: %w",
			name, until.Sub(started).Round(time.Minute), p.MaxLifetime, left, ErrLimit)
	}
	return nil
}

// extend pushes the box's max-duration deadline out by by: the machine's
// timer moves at once (on every gateway of a cluster when its timer
// fires), the records of both the core and the machine keep it across a
// restart, and the change is an audit row and an event.
func (f *Fleet) extend(ctx context.Context, caller keys.Actor, name string, by time.Duration) (Box, error) {
	if by <= 0 {
		return Box{}, f.safeErr(fmt.Errorf("extend by %v: want a positive duration: %w", by, ErrInvalid))
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	e := f.entry(caller, "box.extend", name)
	e.Detail = "by " + by.String()
	deny := func(err error) (Box, error) {
		f.audit.Finish(ctx, e, err, "denied")
		return Box{}, f.safeErr(err)
	}
	switch rec.State {
	case Failed, Destroyed, Creating:
		return deny(fmt.Errorf("box %q is %s: only a started, live box has a deadline to extend: %w", name, rec.State, ErrConflict))
	}
	mb, err := f.vm.Get(rec.VM)
	if err != nil {
		return Box{}, f.safeErr(fmt.Errorf("box %q: its machine: %w", name, vmErr(err)))
	}
	dl := mb.Deadline()
	if dl.IsZero() {
		return deny(fmt.Errorf("box %q has no deadline (fleet.max_duration is 0): nothing to extend: %w", name, ErrConflict))
	}
	until := dl.Add(by)
	if err := checkLifetime(f.policy.get(), name, mb.Started, dl, until); err != nil {
		return deny(err)
	}
	mb, err = f.vm.SetMaxDuration(ctx, rec.VM, mb.Spec.MaxDuration+by)
	if err != nil {
		return Box{}, f.safeErr(fmt.Errorf("extend box %q: %w", name, vmErr(err)))
	}
	rec.Deadline = mb.Deadline()
	e.Detail += " to " + rec.Deadline.UTC().Format(time.RFC3339)
	if err := f.records.save(ctx, rec, e); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.events.emit(rec, EventState, "box.extend")
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}
