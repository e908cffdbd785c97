package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
)

// files reads and writes under a box's /workspace for the fronts: stat,
// readdir, artifacts, writes, and the diff of its repos. None of it wakes a
// box, and everything that leaves the box passes the redactor. Its errors
// are already redacted.
type files struct {
	vm    Machines
	locks *locks
	red   *redact.Redactor
	audit *audit.Log
	now   func() time.Time
}

// withMachine runs fn on the box's machine name. It never wakes the box:
// the file operations (reads and writes alike) work on a box that runs and
// answer ErrConflict on a sleeping one, so listing or fetching a file
// changes no box's state.
func (ws *files) withMachine(ctx context.Context, caller keys.Actor, name string, fn func(vmName string) error) error {
	return ws.withRecord(ctx, caller, name, func(rec record) error { return fileErr(fn(rec.VM)) })
}

// withRecord runs fn on the record of an awake box, under its lock, and
// redacts what fails.
func (ws *files) withRecord(ctx context.Context, caller keys.Actor, name string, fn func(rec record) error) error {
	rec, lock, err := ws.locks.lockBox(ctx, caller, name)
	if err != nil {
		return ws.red.Error(err)
	}
	defer lock.Unlock()
	if err := awake(rec); err != nil {
		return ws.red.Error(err)
	}
	return ws.red.Error(fn(rec))
}

// audited records e for an action that ended with err and returns err.
func (ws *files) audited(ctx context.Context, e audit.Entry, err error) error {
	if err != nil {
		ws.audit.Finish(ctx, e, err, audit.ResultError)
		return err
	}
	return ws.audit.Record(ctx, e)
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
func (ws *files) fileInfo(fi agent.FileInfo) FileInfo {
	name, link := ws.red.String(fi.Name), ws.red.String(fi.Link)
	return FileInfo{Name: name, Link: link, Size: fi.Size, Mode: fi.Mode, ModTime: fi.ModTime,
		Redacted: name.String() != fi.Name}
}

func (ws *files) stat(ctx context.Context, caller keys.Actor, name, path string) (FileInfo, error) {
	var fi agent.FileInfo
	err := ws.withMachine(ctx, caller, name, func(m string) (err error) {
		fi, err = ws.vm.Stat(ctx, m, path)
		return err
	})
	if err != nil {
		return FileInfo{}, err
	}
	return ws.fileInfo(fi), nil
}

func (ws *files) readDir(ctx context.Context, caller keys.Actor, name, path string) ([]FileInfo, error) {
	var list []agent.FileInfo
	err := ws.withMachine(ctx, caller, name, func(m string) (err error) {
		list, err = ws.vm.ReadDir(ctx, m, path)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, len(list))
	for i, fi := range list {
		out[i] = ws.fileInfo(fi)
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
func (ws *files) artifact(ctx context.Context, caller keys.Actor, name, path string) (io.ReadCloser, FileInfo, error) {
	var (
		fi agent.FileInfo
		rc io.ReadCloser
	)
	err := ws.withMachine(ctx, caller, name, func(m string) (err error) {
		if fi, err = ws.vm.Stat(ctx, m, path); err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: %w", path, ErrInvalid)
		}
		rc, err = ws.vm.ReadFile(ctx, m, path)
		return err
	})
	if err != nil {
		return nil, FileInfo{}, err
	}
	_ = ws.audit.Record(ctx, caller.Entry(ws.now(), "box.artifact", name+":"+path))
	return readCloser{ws.red.NewReader(rc), rc}, ws.fileInfo(fi), nil
}

type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

func (ws *files) writeFile(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode, r io.Reader) error {
	err := ws.withMachine(ctx, caller, name, func(m string) error { return ws.vm.WriteFile(ctx, m, path, mode, r) })
	return ws.audited(ctx, caller.Entry(ws.now(), "box.write", name+":"+path), err)
}

func (ws *files) mkdirAll(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode) error {
	return ws.withMachine(ctx, caller, name, func(m string) error { return ws.vm.MkdirAll(ctx, m, path, mode) })
}

func (ws *files) remove(ctx context.Context, caller keys.Actor, name, path string) error {
	err := ws.withMachine(ctx, caller, name, func(m string) error { return ws.vm.Remove(ctx, m, path) })
	return ws.audited(ctx, caller.Entry(ws.now(), "box.remove", name+":"+path), err)
}

// diffScript prints, for one repo, the numstat and then the patch against
// the base commit, untracked files included, using a throwaway index so
// the agent's own index is untouched. It runs as the agent user: the repo
// and its .git/config are the agent's, so git run there by root would run
// the agent's code as root (core.fsmonitor, filters), and the objects
// `git add` writes would be root's, which the agent's next `git add`
// could not write beside.
const diffScript = `set -e
cd "$1"
idx=$(mktemp)
trap 'rm -f "$idx"' EXIT
cp .git/index "$idx" 2>/dev/null || true
export GIT_INDEX_FILE="$idx"
git add -A >/dev/null 2>&1
git diff --cached --numstat --no-renames "$2"
printf '\0'
git diff --cached --no-renames --no-color --no-ext-diff "$2"
`

// maxPatch caps the patch a front gets.
const maxPatch = 8 << 20

func (ws *files) diff(ctx context.Context, caller keys.Actor, name string) (Diff, error) {
	// A diff only reads: a sleeping box stays asleep and says so.
	d := Diff{Files: []FileStat{}}
	var patch strings.Builder
	err := ws.withRecord(ctx, caller, name, func(rec record) error {
		for _, r := range rec.Repos {
			out, err := run(ctx, ws.vm, rec.VM, agent.ExecRequest{User: agent.AgentUser, Argv: []string{"/bin/sh", "-c", diffScript, "sh", "/workspace/" + r.Dir, r.Base}})
			var exit *exitError
			if errors.As(err, &exit) {
				// The repo in the box is gone or broken (the agent or a user
				// removed it): the box's state, not a fault of sbx.
				return fmt.Errorf("diff of %s: the repo in the box cannot be diffed (%s): %w", r.Name, lastLine(out), ErrConflict)
			}
			if err != nil {
				return fmt.Errorf("diff of %s: %w", r.Name, vmErr(err))
			}
			stat, p, _ := strings.Cut(out, "\x00")
			for _, line := range strings.Split(strings.TrimSpace(stat), "\n") {
				parts := strings.SplitN(line, "\t", 3)
				if len(parts) != 3 {
					continue
				}
				st := FileStat{Path: ws.red.String(r.Dir + "/" + parts[2])}
				if parts[0] == "-" {
					st.Binary = true
				} else {
					st.Added, _ = strconv.Atoi(parts[0])
					st.Deleted, _ = strconv.Atoi(parts[1])
				}
				d.Files = append(d.Files, st)
			}
			// Prefix paths with the repo's directory so patches of several
			// repos stay apart.
			p = strings.NewReplacer("\n--- a/", "\n--- a/"+r.Dir+"/", "\n+++ b/", "\n+++ b/"+r.Dir+"/",
				"diff --git a/", "diff --git a/"+r.Dir+"/", " b/", " b/"+r.Dir+"/").Replace(p)
			patch.WriteString(p)
		}
		return nil
	})
	if err != nil {
		return Diff{}, err
	}
	text := patch.String()
	if len(text) > maxPatch {
		text = text[:maxPatch] + "\n… patch cut at 8 MiB\n"
	}
	d.Patch = ws.red.String(text)
	return d, nil
}
