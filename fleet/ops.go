package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// machine makes sure the box's machine runs, waking it when it sleeps; woke
// says whether it had to. The caller holds the box's lock.
func (f *Fleet) machine(ctx context.Context, caller keys.Actor, rec *record) (woke bool, err error) {
	switch rec.State {
	case Sleeping:
		if err := f.wakeLocked(ctx, caller, rec); err != nil {
			return false, err
		}
		return true, nil
	case Running, Waiting, Done:
		return false, nil
	case Creating:
		return false, fmt.Errorf("box %q is still being set up: %w", rec.Name, ErrConflict)
	default:
		return false, fmt.Errorf("box %q has %s (%s): %w", rec.Name, rec.State, rec.Reason, ErrConflict)
	}
}

func (f *Fleet) exec(ctx context.Context, caller keys.Actor, name string, req agent.ExecRequest) (*Process, error) {
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("exec: empty command: %w", ErrInvalid)
	}
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	defer rt.mu.Unlock()
	woke, err := f.machine(ctx, caller, &rec)
	if err != nil {
		return nil, f.safeErr(err)
	}
	if f.net != nil {
		// A shell in the box reaches out the way its agent does: through
		// the gateway's proxy (the request's own entries win).
		req.Env = append(withoutKeys(netEnv(), req.Env), req.Env...)
	}
	p, err := f.vm.Exec(ctx, rec.VM, req)
	e := f.entry(caller, "box.exec", name)
	e.Detail = firstWord(req.Argv)
	if err != nil {
		f.audit.Finish(ctx, e, err, "error")
		return nil, f.safeErr(fmt.Errorf("exec in box %q: %w", name, err))
	}
	_ = f.audit.Record(ctx, e)
	return newProcess(f.red, p, woke, req.TTY), nil
}

func firstWord(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// withMachine runs fn on the box's machine name, waking it if needed.
func (f *Fleet) withMachine(ctx context.Context, caller keys.Actor, name string, fn func(vmName string) error) error {
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer rt.mu.Unlock()
	if _, err := f.machine(ctx, caller, &rec); err != nil {
		return f.safeErr(err)
	}
	return f.safeErr(fileErr(fn(rec.VM)))
}

// fileErr maps the vm's file errors to the core's.
func fileErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, agent.ErrEscape), errors.Is(err, fs.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (f *Fleet) stat(ctx context.Context, caller keys.Actor, name, path string) (fi agent.FileInfo, err error) {
	err = f.withMachine(ctx, caller, name, func(m string) error {
		fi, err = f.vm.Stat(ctx, m, path)
		return err
	})
	return fi, err
}

func (f *Fleet) readDir(ctx context.Context, caller keys.Actor, name, path string) (list []agent.FileInfo, err error) {
	err = f.withMachine(ctx, caller, name, func(m string) error {
		list, err = f.vm.ReadDir(ctx, m, path)
		return err
	})
	return list, err
}

// artifactSniff is how much of a file decides text or binary.
const artifactSniff = 8 << 10

func (f *Fleet) artifact(ctx context.Context, caller keys.Actor, name, path string) (rc io.ReadCloser, fi agent.FileInfo, err error) {
	err = f.withMachine(ctx, caller, name, func(m string) error {
		if fi, err = f.vm.Stat(ctx, m, path); err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: %w", path, ErrInvalid)
		}
		rc, err = f.vm.ReadFile(ctx, m, path)
		return err
	})
	if err != nil {
		return nil, fi, err
	}
	_ = f.audit.Record(ctx, f.entry(caller, "box.artifact", name+":"+path))
	return f.sniffed(rc), fi, nil
}

// sniffed redacts a text file as it streams and passes a binary one
// byte-exact; the first 8 KiB decide (by content, never by extension).
func (f *Fleet) sniffed(rc io.ReadCloser) io.ReadCloser {
	head := make([]byte, artifactSniff)
	n, err := io.ReadFull(rc, head)
	head = head[:n]
	rest := io.MultiReader(strings.NewReader(string(head)), rc)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		rest = io.MultiReader(strings.NewReader(string(head)), errReader{err})
	}
	if redact.IsText(head) {
		return readCloser{f.red.NewReader(rest), rc}
	}
	return readCloser{rest, rc}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

func (f *Fleet) writeFile(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode, r io.Reader) error {
	err := f.withMachine(ctx, caller, name, func(m string) error { return f.vm.WriteFile(ctx, m, path, mode, r) })
	e := f.entry(caller, "box.write", name+":"+path)
	if err != nil {
		f.audit.Finish(ctx, e, err, "error")
		return err
	}
	return f.audit.Record(ctx, e)
}

func (f *Fleet) mkdirAll(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode) error {
	return f.withMachine(ctx, caller, name, func(m string) error { return f.vm.MkdirAll(ctx, m, path, mode) })
}

func (f *Fleet) remove(ctx context.Context, caller keys.Actor, name, path string) error {
	err := f.withMachine(ctx, caller, name, func(m string) error { return f.vm.Remove(ctx, m, path) })
	e := f.entry(caller, "box.remove", name+":"+path)
	if err != nil {
		f.audit.Finish(ctx, e, err, "error")
		return err
	}
	return f.audit.Record(ctx, e)
}

func (f *Fleet) stats(ctx context.Context, caller keys.Actor, name string) (vm.Stats, error) {
	rec, err := f.resolve(ctx, caller, name)
	if err != nil {
		return vm.Stats{}, f.safeErr(err)
	}
	switch rec.State {
	case Running, Waiting, Done:
		st, err := f.vm.Stats(ctx, rec.VM)
		return st, f.safeErr(err)
	}
	return vm.Stats{}, nil
}

func (f *Fleet) keep(ctx context.Context, caller keys.Actor, name string, keep bool) (Box, error) {
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer rt.mu.Unlock()
	rec.Keep = keep
	action := "box.keep"
	if !keep {
		action = "box.unkeep"
	}
	if err := f.save(ctx, rec, f.entry(caller, action, name)); err != nil {
		return Box{}, f.safeErr(err)
	}
	f.emit(rec, EventState, action)
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (f *Fleet) setAllow(ctx context.Context, caller keys.Actor, name string, domains []string) (Box, error) {
	allow, err := cleanAllow(domains)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer rt.mu.Unlock()
	rec.Allow = allow
	e := f.entry(caller, "box.allow", name)
	e.Detail = strings.Join(allow, " ")
	if err := f.save(ctx, rec, e); err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (f *Fleet) addAccount(ctx context.Context, caller keys.Actor, name, token, probeRepo string) (accounts.Account, error) {
	var probe accounts.Repo
	if probeRepo != "" {
		r, err := f.accounts.ResolveRepo(probeRepo)
		if err != nil {
			return accounts.Account{}, f.safeErr(fmt.Errorf("%w: %w", ErrInvalid, err))
		}
		probe = r
	}
	a, err := f.accounts.Add(ctx, caller, caller.User, name, token, probe)
	if err != nil {
		return accounts.Account{}, f.safeErr(err)
	}
	// The new token is redacted everywhere from now on.
	if err := f.red.Refresh(ctx); err != nil {
		f.log.Warn("redactor refresh after account add", "err", err)
	}
	return a, nil
}

func (f *Fleet) removeAccount(ctx context.Context, caller keys.Actor, name string) error {
	return f.safeErr(f.accounts.Remove(ctx, caller, caller.User, name))
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
