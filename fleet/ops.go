package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
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

// withMachine runs fn on the box's machine name. It never wakes the box:
// the file operations (reads and writes alike) work on a box that runs and
// answer ErrConflict on a sleeping one, so listing or fetching a file
// changes no box's state.
func (f *Fleet) withMachine(ctx context.Context, caller keys.Actor, name string, fn func(vmName string) error) error {
	rec, rt, err := f.lockBox(ctx, caller, name)
	if err != nil {
		return f.safeErr(err)
	}
	defer rt.mu.Unlock()
	if err := awake(rec); err != nil {
		return f.safeErr(err)
	}
	return f.safeErr(fileErr(fn(rec.VM)))
}

// fileErr maps the vm's file errors to the core's: whatever the caller can
// get wrong about a path (missing, outside /workspace, a file where a
// directory is wanted, a name too long, not a regular file) is ErrNotFound
// or ErrInvalid, so every front answers it as the caller's mistake. The
// message is the guest's own ("readdir a.txt: not a directory").
func fileErr(err error) error {
	if err == nil {
		return nil
	}
	var kind error
	switch {
	case errors.Is(err, agent.ErrEscape), errors.Is(err, fs.ErrInvalid):
		kind = ErrInvalid
	case errors.Is(err, fs.ErrNotExist):
		kind = ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		kind = ErrForbidden
	case errors.Is(err, fs.ErrExist):
		kind = ErrConflict
	default:
		return err
	}
	msg := err.Error()
	if ae := (*agent.Error)(nil); errors.As(err, &ae) {
		msg = ae.Msg
	}
	return &pathError{msg: msg + ": " + kind.Error(), errs: []error{kind, err}}
}

// pathError is a file error in the caller's words, matching both the core's
// kind and the vm's original error.
type pathError struct {
	msg  string
	errs []error
}

func (e *pathError) Error() string   { return e.msg }
func (e *pathError) Unwrap() []error { return e.errs }

// FileInfo describes a file under a box's /workspace as fronts see it. Its
// name and symlink target come from the box, so they are redacted like every
// other text from it. A name that held a secret is shown with the secret
// replaced, and Redacted says so: the shown name opens nothing (the core
// never maps a redacted name back to the file it came from), so no bytes
// leave a box under a name the redactor did not pass.
type FileInfo struct {
	Name redact.Safe
	// Link is a symlink's target.
	Link redact.Safe
	// Size is the file's size in the box. The bytes Artifact serves are
	// redacted and may be fewer or more: a front counts what it sends and
	// never announces Size as their length.
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	// Redacted: Name is not the file's name in the box (it held a secret).
	Redacted bool
}

// IsDir reports whether fi is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// fileInfo is the front's view of a vm FileInfo: name and link redacted.
func (f *Fleet) fileInfo(fi agent.FileInfo) FileInfo {
	name, link := f.red.String(fi.Name), f.red.String(fi.Link)
	return FileInfo{Name: name, Link: link, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime,
		Redacted: name.String() != fi.Name}
}

func (f *Fleet) stat(ctx context.Context, caller keys.Actor, name, path string) (FileInfo, error) {
	var fi agent.FileInfo
	err := f.withMachine(ctx, caller, name, func(m string) (err error) {
		fi, err = f.vm.Stat(ctx, m, path)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return f.fileInfo(fi), nil
}

func (f *Fleet) readDir(ctx context.Context, caller keys.Actor, name, path string) ([]FileInfo, error) {
	var list []agent.FileInfo
	err := f.withMachine(ctx, caller, name, func(m string) (err error) {
		list, err = f.vm.ReadDir(ctx, m, path)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, len(list))
	for i, fi := range list {
		out[i] = f.fileInfo(fi)
	}
	return out, nil
}

// artifact streams a file out of the box through the redactor: text and
// binary alike, every byte. Redacting a binary changes its bytes where a
// secret or something credential-shaped sits (an archive or a program that
// held one no longer checks out): that is the point, since a box can put a
// secret in a file with a NUL in front as easily as in a text file. Known
// secrets are matched byte-exact, so one embedded in binary data is found;
// the credential patterns apply too. The stream's length may differ from
// FileInfo.Size.
func (f *Fleet) artifact(ctx context.Context, caller keys.Actor, name, path string) (io.ReadCloser, FileInfo, error) {
	var (
		fi agent.FileInfo
		rc io.ReadCloser
	)
	err := f.withMachine(ctx, caller, name, func(m string) (err error) {
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
		return nil, FileInfo{}, err
	}
	_ = f.audit.Record(ctx, f.entry(caller, "box.artifact", name+":"+path))
	return readCloser{f.red.NewReader(rc), rc}, f.fileInfo(fi), nil
}

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

func (f *Fleet) stats(ctx context.Context, caller keys.Actor, name string) (Stats, error) {
	rec, err := f.resolve(ctx, caller, name)
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
