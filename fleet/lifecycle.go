package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

// sleep, wake and destroy: what a caller and the timers do to a box's
// machine. The *Locked forms run under the box's lock.

func (f *Fleet) sleep(ctx context.Context, caller keys.Actor, name, why string) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if err := f.sleepLocked(ctx, caller, &rec, why); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (f *Fleet) sleepLocked(ctx context.Context, caller keys.Actor, rec *record, why string) error {
	switch rec.State {
	case Running, Waiting, Done:
	case Sleeping:
		return fmt.Errorf("box %q is already asleep: %w", rec.Name, ErrConflict)
	default:
		return fmt.Errorf("box %q is %s and cannot sleep: %w", rec.Name, rec.State, ErrConflict)
	}
	f.runs.stop(rec.Name)
	if _, err := f.vm.Sleep(ctx, rec.VM); err != nil {
		if rec.State == Running {
			f.runs.follow(*rec, nil)
		}
		return vmErr(err)
	}
	rec.StateBeforeSleep = rec.State
	rec.SleptAt = f.now()
	return f.records.transition(ctx, rec, Sleeping, caller, "box.sleep", why)
}

func (f *Fleet) wake(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if rec.State != Sleeping {
		return Box{}, f.safeErr(fmt.Errorf("box %q is %s, not asleep: %w", name, rec.State, ErrConflict))
	}
	if err := f.wakeLocked(ctx, caller, &rec); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// wakeLocked brings a sleeping box back to where it was. A turn that was
// running resumes being followed; after a cold boot (no usable memory
// snapshot) the agent's process is gone, so the turn ends as lost.
func (f *Fleet) wakeLocked(ctx context.Context, caller keys.Actor, rec *record) error {
	b, err := f.vm.Wake(ctx, rec.VM)
	if err != nil {
		return vmErr(err)
	}
	to := rec.StateBeforeSleep
	if to == "" {
		to = Done
	}
	cold := strings.Contains(strings.ToLower(b.Reason), "cold")
	rec.SleptAt = time.Time{}
	rec.LastOutput = f.now()
	if cold && to == Running {
		rec.TurnDone = true
		_ = f.logs.append(rec.Name, fmt.Sprintf("── turn %d lost: the box woke by a cold boot (%s) ──\n", rec.Turn, b.Reason))
		to = Done
	}
	if err := f.records.transition(ctx, rec, to, caller, "box.wake", b.Reason); err != nil {
		return err
	}
	if to == Running {
		f.runs.follow(*rec, nil)
	}
	return nil
}

func (f *Fleet) destroy(ctx context.Context, caller keys.Actor, name string) error {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer lock.Unlock()
	return f.safeErr(f.destroyLocked(ctx, caller, &rec, ""))
}

func (f *Fleet) destroyLocked(ctx context.Context, caller keys.Actor, rec *record, why string) error {
	f.runs.stop(rec.Name)
	if rec.VM != "" {
		if err := f.vm.Destroy(ctx, rec.VM); err != nil && !errors.Is(vmErr(err), ErrNotFound) {
			return fmt.Errorf("destroy box %q: %w", rec.Name, vmErr(err))
		}
	}
	if f.net != nil && rec.VM != "" {
		f.net.Detach(rec.VM)
	}
	e := f.entry(caller, "box.destroy", rec.Name)
	e.Detail = why
	if err := f.store.DeleteBox(ctx, rec.Name, e); err != nil {
		return err
	}
	f.audit.Finish(ctx, e, nil, "")
	rec.State = Destroyed
	f.locks.drop(rec.Name)
	f.logs.remove(rec.Name) // followers get io.EOF
	f.events.emit(*rec, EventRemoved, why)
	return nil
}

// Tick runs the lifecycle timers once against the Fleet's clock: idle
// boxes go to sleep, sleeping boxes past their TTL (and not kept) are
// destroyed, and the warm pool is refilled. New runs it periodically;
// tests with an injected clock call it directly.
func (f *Fleet) Tick(ctx context.Context) {
	recs, err := f.records.loadAll(ctx)
	if err != nil {
		f.log.Warn("lifecycle tick", "err", err)
		return
	}
	p := f.policy.get()
	now := f.now()
	for _, r := range recs {
		switch {
		case p.IdleSleep > 0 && (r.State == Running || r.State == Waiting || r.State == Done):
			last := r.LastOutput
			if last.IsZero() {
				last = r.Updated
			}
			if now.Sub(last) >= p.IdleSleep && f.leases.once(ctx, fmt.Sprintf("box/%s/idle-sleep/%d", r.Name, last.UnixNano()), timerTTL) {
				f.timer(ctx, r.Name, func(rec *record) error {
					return f.sleepLocked(ctx, system(), rec, fmt.Sprintf("idle for %s", p.IdleSleep))
				}, func(rec record) bool {
					l := rec.LastOutput
					if l.IsZero() {
						l = rec.Updated
					}
					return (rec.State == Running || rec.State == Waiting || rec.State == Done) && f.now().Sub(l) >= p.IdleSleep
				})
			}
		case p.SleepTTL > 0 && r.State == Sleeping && !r.Keep && !r.SleptAt.IsZero() && now.Sub(r.SleptAt) >= p.SleepTTL &&
			f.leases.once(ctx, fmt.Sprintf("box/%s/sleep-ttl/%d", r.Name, r.SleptAt.UnixNano()), timerTTL):
			f.timer(ctx, r.Name, func(rec *record) error {
				return f.destroyLocked(ctx, system(), rec, fmt.Sprintf("asleep for %s (sleep TTL)", p.SleepTTL))
			}, func(rec record) bool {
				return rec.State == Sleeping && !rec.Keep && f.now().Sub(rec.SleptAt) >= p.SleepTTL
			})
		}
	}
	if f.leases.on() {
		f.takeOver(ctx, recs)
		f.pool.keep(ctx, recs)
	}
	f.pool.refill()
	f.notify.tick(ctx, recs)
}

// takeOver follows the turns no live gateway follows (their gateway
// stopped): the first gateway to take the lease resumes from the stored
// offset. Cluster only.
func (f *Fleet) takeOver(ctx context.Context, recs []record) {
	for _, r := range recs {
		if r.State == Creating && f.now().Sub(r.Updated) > staleSetup &&
			f.leases.once(ctx, fmt.Sprintf("box/%s/setup-lost/%d", r.Name, r.Updated.UnixNano()), timerTTL) {
			// The gateway setting it up stopped (recover does this for
			// boxes of a gateway that restarts; here nobody may).
			f.timer(ctx, r.Name, func(rec *record) error {
				rec.Reason = "the gateway setting it up stopped"
				return f.records.transition(ctx, rec, Failed, system(), "box.fail", rec.Reason)
			}, func(rec record) bool { return rec.State == Creating && f.now().Sub(rec.Updated) > staleSetup })
			continue
		}
		if r.State != Running || r.TurnDone || r.VM == "" {
			continue
		}
		lock := f.locks.get(r.Name)
		if !lock.TryLock() {
			continue
		}
		if !f.runs.following(r.Name) {
			if rec, err := f.records.load(ctx, r.Name); err == nil && rec.State == Running && !rec.TurnDone {
				f.runs.follow(rec, nil)
			}
		}
		lock.Unlock()
	}
}

// timer applies a timer's action to a box under its lock if the condition
// still holds there.
func (f *Fleet) timer(ctx context.Context, name string, act func(*record) error, still func(record) bool) {
	lock := f.locks.get(name)
	lock.Lock()
	defer lock.Unlock()
	rec, err := f.records.load(ctx, name)
	if err != nil || !still(rec) {
		return
	}
	if err := act(&rec); err != nil {
		f.log.Warn("lifecycle timer", "box", name, "err", err)
	}
}

// recover resumes from the store after a (re)start: following turns that
// were running, failing boxes whose setup was cut short or whose machine is
// gone, and re-registering warm-pool machines.
func (f *Fleet) recover(ctx context.Context) error {
	recs, err := f.records.loadAll(ctx)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, rec := range recs {
		used[rec.VM] = true
		if rec.State == Destroyed || rec.State == Failed {
			continue
		}
		if f.net != nil && rec.VM != "" {
			if _, err := f.net.Attach(ctx, rec.VM); err != nil {
				f.log.Warn("re-attach network path", "box", rec.Name, "err", err)
			}
		}
		lock := f.locks.get(rec.Name)
		lock.Lock()
		mb, vmErr := f.vm.Get(rec.VM)
		switch {
		case rec.State == Creating && f.leases.on() && f.now().Sub(rec.Updated) < staleSetup:
			// Another gateway may be setting it up right now.
		case rec.State == Running && !rec.TurnDone && f.leases.on() && vmErr == nil && mb.State == vm.Running:
			// Followed by whoever holds its lease; the ticks take it over
			// when that gateway is gone.
		case rec.State == Creating:
			rec.Reason = "the gateway stopped while the box was being set up"
			_ = f.records.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case rec.VM == "" || vmErr != nil:
			rec.Reason = "its machine is gone"
			_ = f.records.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case mb.State == vm.Failed:
			rec.Reason = "machine failed: " + mb.Reason
			_ = f.records.transition(ctx, &rec, Failed, system(), "box.fail", rec.Reason)
		case mb.State == vm.Sleeping && rec.State != Sleeping:
			// The gateway stopped after the machine's sleep was complete
			// and before the core recorded it: the box sleeps (found by
			// the fault suite, "gateway kill -9 mid-sleep").
			rec.StateBeforeSleep, rec.SleptAt = rec.State, f.now()
			_ = f.records.transition(ctx, &rec, Sleeping, system(), "box.sleep", "the gateway stopped during the sleep: "+mb.Reason)
		case rec.State == Running && !rec.TurnDone && mb.State == vm.Running:
			f.runs.follow(rec, nil)
		}
		lock.Unlock()
	}
	for _, b := range f.vm.List() {
		// On a cluster the unclaimed warm boxes may be another gateway's.
		if !f.leases.on() && strings.HasPrefix(b.Name, poolPrefix) && !used[b.Name] {
			if b.State == vm.Running {
				if f.net != nil {
					_, _ = f.net.Attach(ctx, b.Name)
				}
				f.pool.add(b.Name)
			} else {
				f.pool.discard(b.Name)
			}
		}
	}
	return nil
}

// watchVM turns machine failures (max duration, a crash) into box failures.
func (f *Fleet) watchVM() {
	for ev := range f.vm.Events(f.bg.ctx) {
		if ev.To == vm.Destroyed && f.net != nil {
			// Destroyed through another gateway of a cluster: stop serving
			// its network path here too (idempotent where it was ours).
			f.net.Detach(ev.Box)
		}
		if ev.To != vm.Failed {
			continue
		}
		if f.pool.drop(ev.Box) {
			f.pool.discard(ev.Box)
			continue
		}
		recs, err := f.records.loadAll(f.bg.ctx)
		if err != nil {
			continue
		}
		for _, r := range recs {
			if r.VM != ev.Box || r.State == Failed || r.State == Destroyed {
				continue
			}
			// Every gateway sees the machine fail; one records it.
			if !f.leases.once(f.bg.ctx, fmt.Sprintf("box/%s/fail/%d", r.Name, ev.At.UnixNano()), timerTTL) {
				continue
			}
			lock := f.locks.get(r.Name)
			lock.Lock()
			if rec, err := f.records.load(f.bg.ctx, r.Name); err == nil && rec.State != Failed {
				rec.Reason = "machine failed: " + ev.Note
				f.runs.cancel(r.Name)
				_ = f.records.transition(f.bg.ctx, &rec, Failed, system(), "box.fail", rec.Reason)
			}
			lock.Unlock()
		}
	}
}
