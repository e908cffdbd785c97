package fleet

import (
	"context"
	"fmt"
	"strings"

	"sbx.dev/sbx/keys"
)

// machine makes sure the box's machine runs, waking it when it sleeps; woke
// says whether it had to. Only the actions that act on a box (exec and
// attach, ask; answer and follow-up wake in answerLocked) call it: what only
// reads uses awake instead. The caller holds the box's lock.
func (f *Fleet) machine(ctx context.Context, caller keys.Actor, rec *record) (woke bool, err error) {
	if rec.State == Sleeping {
		if err := f.wakeLocked(ctx, caller, rec); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, awake(*rec)
}

// awake refuses a box whose machine does not run. The read paths (files,
// artifacts, diff) use it: reading never changes a box, so a sleeping box
// says so rather than being woken by a read-scoped key.
func awake(rec record) error {
	switch rec.State {
	case Running, Waiting, Done:
		return nil
	case Sleeping:
		return fmt.Errorf("box %q is asleep, and reading does not wake it: wake it first (ssh <gateway> wake %s, the console's Wake button or the MCP wake tool): %w",
			rec.Name, rec.Name, ErrConflict)
	case Creating:
		return fmt.Errorf("box %q is still being set up: %w", rec.Name, ErrConflict)
	default:
		return fmt.Errorf("box %q has %s (%s): %w", rec.Name, rec.State, rec.Reason, ErrConflict)
	}
}

func (f *Fleet) exec(ctx context.Context, caller keys.Actor, name string, req ExecRequest) (*Process, error) {
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("exec: empty command: %w", ErrInvalid)
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	defer lock.Unlock()
	woke, err := f.machine(ctx, caller, &rec)
	if err != nil {
		return nil, f.safeErr(err)
	}
	if f.net != nil {
		// A shell in the box reaches out the way its agent does: through
		// the gateway's proxy (the request's own entries win).
		req.Env = append(withoutKeys(netEnv(), req.Env), req.Env...)
	}
	p, err := f.vm.Exec(ctx, rec.VM, req.wire())
	e := f.entry(caller, "box.exec", name)
	e.Detail = firstWord(req.Argv) + " as " + execUserName(req.User)
	if err != nil {
		f.audit.Finish(ctx, e, err, "error")
		return nil, f.safeErr(fmt.Errorf("exec in box %q: %w", name, err))
	}
	_ = f.audit.Record(ctx, e)
	return newProcess(f.red, p, woke, req.TTY), nil
}

// execUserName is who an exec runs as, for its audit row.
func execUserName(user string) string {
	if user == "" {
		return "root"
	}
	return user
}

func firstWord(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

func (f *Fleet) stats(ctx context.Context, caller keys.Actor, name string) (Stats, error) {
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return Stats{}, f.safeErr(err)
	}
	switch rec.State {
	case Running, Waiting, Done:
		st, err := f.vm.Stats(ctx, rec.VM)
		return Stats{CPUPercent: st.CPUPercent, PrivateBytes: st.PrivateBytes}, f.safeErr(err)
	}
	return Stats{}, nil
}

func (f *Fleet) keep(ctx context.Context, caller keys.Actor, name string, keep bool) (Box, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	rec.Keep = keep
	action := "box.keep"
	if !keep {
		action = "box.unkeep"
	}
	if err := f.records.save(ctx, rec, f.entry(caller, action, name)); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.events.emit(rec, EventState, action)
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (f *Fleet) setAllow(ctx context.Context, caller keys.Actor, name string, domains []string) (Box, error) {
	allow, err := cleanAllow(domains)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	rec.Allow = allow
	e := f.entry(caller, "box.allow", name)
	e.Detail = strings.Join(allow, " ")
	if err := f.records.save(ctx, rec, e); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// withoutKeys drops from env the variables that over sets.
func withoutKeys(env, over []string) []string {
	set := map[string]bool{}
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	return out
}
