package agentd

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

func (s *server) rel(p string) (string, error) { return agent.Rel(p) }

// openIn opens rel beneath dirfd; nothing may resolve outside it: not "..",
// not an absolute symlink, not a /proc magic link.
func openIn(dirfd int, rel string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(dirfd, rel, how)
		switch err {
		case nil:
			return fd, nil
		case unix.EINTR, unix.EAGAIN: // EAGAIN: a concurrent rename; retry
			continue
		case unix.EXDEV, unix.ELOOP:
			if err == unix.ELOOP && flags&unix.O_NOFOLLOW != 0 {
				return -1, err
			}
			return -1, agent.ErrEscape
		default:
			return -1, err
		}
	}
	return -1, unix.EAGAIN
}

func (s *server) open(rel string, flags int, mode uint32) (int, error) {
	return openIn(s.rootFD, rel, flags, mode)
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// kindOf names a file type for a message.
func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsDir():
		return "a directory"
	}
	return "a special file"
}

func infoOf(name string, st *unix.Stat_t) agent.FileInfo {
	return agent.FileInfo{
		Name:    name,
		Size:    st.Size,
		Mode:    fileMode(st.Mode),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
	}
}

func baseName(rel string) string {
	if rel == "." {
		return path.Base(agent.Workspace)
	}
	return path.Base(rel)
}

func (s *server) stat(p string) (agent.FileInfo, error) {
	rel, err := agent.Rel(p)
	if err != nil {
		return agent.FileInfo{}, err
	}
	fd, err := s.open(rel, unix.O_PATH, 0)
	if err != nil {
		return agent.FileInfo{}, pathErr("stat", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return agent.FileInfo{}, pathErr("stat", p, err)
	}
	return infoOf(baseName(rel), &st), nil
}

// lstatAt describes name in dirfd without following a symlink.
func lstatAt(dirfd int, name string) (agent.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return agent.FileInfo{}, err
	}
	fi := infoOf(name, &st)
	if fi.Mode&fs.ModeSymlink != 0 {
		buf := make([]byte, unix.PathMax)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			fi.Link = string(buf[:n])
		}
	}
	return fi, nil
}

// names lists a directory fd (which it consumes), sorted.
func names(dirfd int) ([]string, error) {
	f := os.NewFile(uintptr(dirfd), "dir")
	defer f.Close()
	ns, err := f.Readdirnames(-1)
	slices.Sort(ns)
	return ns, err
}

func (s *server) readDir(p string) ([]agent.FileInfo, error) {
	rel, err := agent.Rel(p)
	if err != nil {
		return nil, err
	}
	fd, err := s.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	ns, err := names(fd)
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	dfd, err := s.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	defer unix.Close(dfd)
	infos := make([]agent.FileInfo, 0, len(ns))
	for _, n := range ns {
		fi, err := lstatAt(dfd, n)
		if err != nil {
			continue // removed while listing
		}
		infos = append(infos, fi)
	}
	return infos, nil
}

// inheritOwner gives fd the owner of the directory dirfd it is created in:
// what the gateway writes into a box belongs to whoever owns the place it
// lands — in a repo the agent user's (an owner's upload the agent can then
// edit), at the workspace's root-owned top root's (the task file). Only a
// root agent changes owners.
func inheritOwner(dirfd, fd int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var dir, st unix.Stat_t
	if err := unix.Fstat(dirfd, &dir); err != nil {
		return err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Uid == dir.Uid && st.Gid == dir.Gid {
		return nil
	}
	return unix.Fchown(fd, int(dir.Uid), int(dir.Gid))
}

// inheritOwnerAt is inheritOwner for the directory name just made in dirfd,
// opened without following a link put in its place.
func inheritOwnerAt(dirfd int, name string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return inheritOwner(dirfd, fd)
}

func (s *server) mkdirAll(p string, mode uint32) error {
	rel, err := agent.Rel(p)
	if err != nil {
		return err
	}
	return pathErr("mkdir", p, mkdirAllIn(s.rootFD, rel, mode))
}

// mkdirAllIn creates rel and its parents beneath dirfd.
func mkdirAllIn(dirfd int, rel string, mode uint32) error {
	if mode == 0 {
		mode = 0o755
	}
	if rel == "." {
		return nil
	}
	parent := "."
	for _, comp := range strings.Split(rel, "/") {
		pfd, err := openIn(dirfd, parent, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, comp, mode)
		if err == nil {
			err = inheritOwnerAt(pfd, comp)
		}
		unix.Close(pfd)
		if err != nil && err != unix.EEXIST {
			return err
		}
		parent = path.Join(parent, comp)
	}
	fd, err := openIn(dirfd, rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func (s *server) remove(p string) error {
	rel, err := agent.Rel(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("remove %q: refusing to remove /workspace itself: %w", p, fs.ErrInvalid)
	}
	pfd, err := s.open(path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return pathErr("remove", p, err)
	}
	defer unix.Close(pfd)
	return pathErr("remove", p, removeAt(pfd, path.Base(rel)))
}

// removeAt removes name in dirfd, a directory with all it holds; symlinks
// are removed, never followed.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	dfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ns, err := names(dfd)
	if err != nil {
		return err
	}
	if len(ns) > 0 {
		dfd, err = unix.Openat(dirfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if err := removeAt(dfd, n); err != nil && err != unix.ENOENT {
				unix.Close(dfd)
				return err
			}
		}
		unix.Close(dfd)
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// hangup closes st when the host closes its side: for calls where the host
// only reads, this is how an abandoned download stops.
func hangup(st *yamux.Stream) {
	go func() {
		_, _ = io.Copy(io.Discard, st)
		st.Close()
	}()
}

func (s *server) readFile(st *yamux.Stream, req agent.Request) {
	fail := func(err error) { _ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)}) }
	rel, err := agent.Rel(req.Path)
	if err != nil {
		fail(err)
		return
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
	// below); on a regular file the flag changes nothing.
	fd, err := s.open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		fail(pathErr("read", req.Path, err))
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		fail(pathErr("read", req.Path, err))
		return
	}
	fi := infoOf(baseName(rel), &sb)
	switch {
	case fi.IsDir():
		fail(pathErr("read", req.Path, fmt.Errorf("is a directory: %w", fs.ErrInvalid)))
		return
	case !fi.Mode.IsRegular():
		fail(pathErr("read", req.Path, fmt.Errorf("not a regular file but %s: %w", kindOf(fi.Mode), fs.ErrInvalid)))
		return
	}
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID, Info: &fi}); err != nil {
		return
	}
	hangup(st)
	cw := agent.NewChunkWriter(st)
	if _, err := cw.ReadFrom(f); err != nil {
		s.log.Debug("agent: read file", "path", req.Path, "err", err)
		return // no end marker: the host sees a truncated stream
	}
	_ = cw.Close()
}

func (s *server) writeFile(st *yamux.Stream, req agent.Request) {
	fail := func(err error) { _ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)}) }
	rel, err := agent.Rel(req.Path)
	if err != nil {
		fail(err)
		return
	}
	if rel == "." {
		fail(fmt.Errorf("write %q: is the workspace directory: %w", req.Path, fs.ErrInvalid))
		return
	}
	mode := req.Mode & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	dfd, err := s.open(path.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fail(pathErr("write", req.Path, err))
		return
	}
	defer unix.Close(dfd)
	base := path.Base(rel)
	tmp := fmt.Sprintf(".%s.sbx-tmp-%d", base, time.Now().UnixNano())
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		fail(pathErr("write", req.Path, err))
		return
	}
	f := os.NewFile(uintptr(fd), tmp)
	committed := false
	defer func() {
		f.Close()
		if !committed {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID}); err != nil {
		return
	}
	_, err = io.Copy(f, agent.NewChunkReader(st))
	if err == nil {
		err = unix.Fchmod(fd, mode) // the umask narrowed the create mode
	}
	if err == nil {
		err = inheritOwner(dfd, fd)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err == nil {
		committed = true
		err = unix.Fsync(dfd)
	}
	fail(pathErr("write", req.Path, err)) // fail(nil) is the success reply
}

func (s *server) watch(ctx doneCtx, st *yamux.Stream, req agent.Request) {
	rel, err := agent.Rel(req.Path)
	if err != nil {
		_ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)})
		return
	}
	last, err := s.stat(rel)
	exists := err == nil
	if err != nil && !isNotExist(err) {
		_ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)})
		return
	}
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID}); err != nil {
		return
	}
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, st)
		close(gone)
	}()
	tick := time.NewTicker(s.opts.WatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-gone:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fi, err := s.stat(rel)
		now := err == nil
		var ev *agent.WatchEvent
		switch {
		case now && !exists:
			ev = &agent.WatchEvent{Kind: agent.Created, Path: req.Path, Info: &fi}
		case !now && exists:
			ev = &agent.WatchEvent{Kind: agent.Removed, Path: req.Path}
		case now && (fi.Size != last.Size || !fi.ModTime.Equal(last.ModTime) || fi.Mode != last.Mode):
			ev = &agent.WatchEvent{Kind: agent.Changed, Path: req.Path, Info: &fi}
		}
		exists, last = now, fi
		if ev != nil {
			if err := agent.WriteFrame(st, agent.Reply{ID: req.ID, Event: ev}); err != nil {
				return
			}
		}
	}
}

type doneCtx interface{ Done() <-chan struct{} }

func isNotExist(err error) bool {
	return err != nil && (os.IsNotExist(err) || errorsIs(err, fs.ErrNotExist))
}
