package agentd

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// tarOut streams req.Path as a tar archive: a directory's entries are named
// relative to it, a file is one entry named by its base name. The walk opens
// every entry relative to its parent's fd with O_NOFOLLOW, so nothing outside
// the root can be read; symlinks are archived as links.
func (s *server) tarOut(st *yamux.Stream, req agent.Request) {
	fail := func(err error) { _ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)}) }
	rel, err := agent.Rel(req.Path)
	if err != nil {
		fail(err)
		return
	}
	fi, err := s.stat(rel)
	if err != nil {
		fail(pathErr("tar", req.Path, err))
		return
	}
	parent := path.Dir(rel)
	if rel == "." {
		parent = "."
	}
	var dfd int
	if fi.IsDir() {
		dfd, err = s.open(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
	} else {
		dfd, err = s.open(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	}
	if err != nil {
		fail(pathErr("tar", req.Path, err))
		return
	}
	defer unix.Close(dfd)
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID, Info: &fi}); err != nil {
		return
	}
	hangup(st)
	cw := agent.NewChunkWriter(st)
	tw := tar.NewWriter(cw)
	if fi.IsDir() {
		err = tarDir(tw, dfd, "")
	} else {
		err = tarEntry(tw, dfd, path.Base(rel), path.Base(rel))
	}
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		s.log.Debug("agent: tar out", "path", req.Path, "err", err)
		return // no end marker: the host sees a truncated stream
	}
	_ = cw.Close()
}

func tarDir(tw *tar.Writer, dfd int, prefix string) error {
	lfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ns, err := names(lfd)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if err := tarEntry(tw, dfd, n, prefix+n); err != nil {
			return err
		}
	}
	return nil
}

// tarEntry archives name (in dfd) as entry, recursing into directories.
func tarEntry(tw *tar.Writer, dfd int, name, entry string) error {
	fi, err := lstatAt(dfd, name)
	if err != nil {
		if err == unix.ENOENT {
			return nil // removed while archiving
		}
		return fmt.Errorf("stat %s: %w", entry, err)
	}
	hdr := &tar.Header{Name: entry, Mode: int64(fi.Mode.Perm()), ModTime: fi.ModTime, Format: tar.FormatPAX}
	switch {
	case fi.Mode.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, entry+"/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		sub, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", entry, err)
		}
		defer unix.Close(sub)
		return tarDir(tw, sub, entry+"/")
	case fi.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, fi.Link
		return tw.WriteHeader(hdr)
	case fi.Mode.IsRegular():
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", entry, err)
		}
		f := os.NewFile(uintptr(fd), entry)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, f, st.Size); err != nil {
			return fmt.Errorf("copy %s: %w", entry, err)
		}
		return nil
	}
	return nil // devices, fifos, sockets: not artifacts
}

// tarIn unpacks the uploaded archive into req.Path. Each entry's parent is
// opened with openat2 beneath the root, so a symlink planted by an earlier
// entry cannot carry a later one outside; the entry itself is created with
// O_EXCL|O_NOFOLLOW after removing what was there.
func (s *server) tarIn(st *yamux.Stream, req agent.Request) {
	fail := func(err error) { _ = agent.WriteFrame(st, agent.Reply{ID: req.ID, Err: agent.ToWire(err)}) }
	dir, err := agent.Rel(req.Path)
	if err != nil {
		fail(err)
		return
	}
	if fd, err := s.open(dir, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		fail(pathErr("untar", req.Path, err))
		return
	} else {
		unix.Close(fd)
	}
	if err := agent.WriteFrame(st, agent.Reply{ID: req.ID}); err != nil {
		return
	}
	err = s.untar(tar.NewReader(agent.NewChunkReader(st)), dir)
	fail(err) // nil: success
}

func (s *server) untar(tr *tar.Reader, dir string) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("untar: %w", err)
		}
		name, err := agent.TarName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		target := path.Join(dir, name)
		if err := s.untarEntry(tr, hdr, dir, target); err != nil {
			return fmt.Errorf("untar %q: %w", hdr.Name, err)
		}
	}
}

func (s *server) untarEntry(tr *tar.Reader, hdr *tar.Header, dir, target string) error {
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir:
		if err := mkdirAllIn(s.rootFD, target, 0o755); err != nil {
			return err
		}
		fd, err := s.open(target, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if mode == 0 {
			mode = 0o755
		}
		return unix.Fchmod(fd, mode)
	case tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		return fmt.Errorf("entry type %q is not supported: %w", hdr.Typeflag, fs.ErrInvalid)
	}
	parent, base := path.Dir(target), path.Base(target)
	if err := mkdirAllIn(s.rootFD, parent, 0o755); err != nil {
		return err
	}
	pfd, err := s.open(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Unlinkat(pfd, base, 0); err != nil && err != unix.ENOENT {
		return err // e.g. a directory is in the way
	}
	switch hdr.Typeflag {
	case tar.TypeSymlink:
		// A link may point anywhere: following it is confined at use.
		return unix.Symlinkat(hdr.Linkname, pfd, base)
	case tar.TypeLink:
		old, err := agent.TarName(hdr.Linkname)
		if err != nil {
			return err
		}
		ofd, err := s.open(path.Join(dir, old), unix.O_PATH|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
		}
		defer unix.Close(ofd)
		return unix.Linkat(ofd, "", pfd, base, unix.AT_EMPTY_PATH)
	}
	if mode == 0 {
		mode = 0o644
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), target)
	defer f.Close()
	if _, err := io.Copy(f, tr); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	return nil
}

var _ = errors.New
