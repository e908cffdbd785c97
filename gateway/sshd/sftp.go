package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/ssh"
	"github.com/pkg/sftp"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
)

// The SFTP subsystem serves every box the caller may see as a directory at
// the root: /BOX/PATH is PATH under the box's /workspace. Everything goes
// through the core, which confines paths to /workspace (no "..", absolute or
// symlink escape) and decides who may read and write.

// sftpSubsystem serves one sftp session. Subsystems do not pass the wish
// middleware chain, so it authorizes here, exactly as userMiddleware does.
func (s *Server) sftpSubsystem(sess ssh.Session) {
	defer s.recover("sftp session", sess.RemoteAddr().String())
	user, ok := s.sessionUser(sess)
	if !ok {
		return
	}
	release, ok := s.holdSession(sess, user.Name)
	if !ok {
		return
	}
	defer release()
	if s.Fleet == nil {
		refuse(sess, s.noFleet().Error())
		return
	}
	ch := s.channelOf(sess)
	if ch == nil {
		refuse(sess, "internal error")
		return
	}
	s.Logger.Info("ssh sftp session", "user", user.Name, "remote", sess.RemoteAddr().String())
	stop := s.keepAlive(sess.Context(), sess)
	defer stop()
	bfs := &boxFS{ctx: sess.Context(), f: s.Fleet, actor: actorOf(user, sess)}
	// Writes go to the raw channel: the library's PTY emulation must never
	// touch the protocol.
	// Closing is the library's: it sends the exit status first.
	rwc := rawRWC{Reader: sess, Writer: ch.raw, Closer: io.NopCloser(nil)}
	srv := sftp.NewRequestServer(rwc, sftp.Handlers{FileGet: bfs, FilePut: bfs, FileCmd: bfs, FileList: bfs})
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		s.Logger.Debug("sftp session ended", "user", user.Name, "err", err)
	}
	_ = srv.Close()
}

type rawRWC struct {
	io.Reader
	io.Writer
	io.Closer
}

func actorOf(user keys.User, sess ssh.Session) keys.Actor {
	return keys.Actor{User: user.Name, Role: user.Role, Front: "ssh", Addr: clientOf(sess.RemoteAddr())}
}

// boxFS is the sftp handlers over the core for one caller.
type boxFS struct {
	ctx   context.Context
	f     *fleet.Fleet
	actor keys.Actor
}

// splitBoxPath turns an sftp path into a box and a path under its
// /workspace ("." for the box itself); box is "" for the root.
func splitBoxPath(p string) (box, rel string, err error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", fmt.Errorf("path %q contains a NUL byte: %w", p, fleet.ErrInvalid)
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", "", fmt.Errorf("path %q: \"..\" is not allowed: %w", p, fleet.ErrInvalid)
		}
	}
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return "", ".", nil
	}
	box, rel, _ = strings.Cut(p, "/")
	if rel == "" {
		rel = "."
	}
	return box, rel, nil
}

// sftpErr gives the client a status code it understands and the core's
// message (already redacted).
func sftpErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fleet.ErrNotFound):
		return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxNoSuchFile)
	case errors.Is(err, fleet.ErrInvalid), errors.Is(err, fleet.ErrForbidden):
		return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxPermissionDenied)
	}
	return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxFailure)
}

func (b *boxFS) split(r *sftp.Request) (string, string, error) {
	box, rel, err := splitBoxPath(r.Filepath)
	return box, rel, sftpErr(err)
}

// Fileread streams a file out of the box.
func (b *boxFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	box, rel, err := b.split(r)
	if err != nil {
		return nil, err
	}
	if box == "" || rel == "." {
		return nil, sftpErr(fmt.Errorf("%s is a directory: %w", r.Filepath, fleet.ErrInvalid))
	}
	rc, _, err := b.f.Artifact(b.ctx, b.actor, box, rel)
	if err != nil {
		return nil, sftpErr(err)
	}
	return newStreamReaderAt(rc), nil
}

// Filewrite streams a file into the box.
func (b *boxFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	box, rel, err := b.split(r)
	if err != nil {
		return nil, err
	}
	if box == "" || rel == "." {
		return nil, sftpErr(fmt.Errorf("%s: files go inside a box (BOX/PATH): %w", r.Filepath, fleet.ErrInvalid))
	}
	mode := fs.FileMode(0o644)
	if r.AttrFlags().Permissions {
		mode = r.Attributes().FileMode().Perm()
	}
	return newStreamWriterAt(func(rd io.Reader) error {
		return sftpErr(b.f.WriteFile(b.ctx, b.actor, box, rel, mode, rd))
	}), nil
}

// Filecmd: mkdir, remove and rmdir; setstat is accepted and ignored (the
// core keeps its own modes); rename and links are not offered.
func (b *boxFS) Filecmd(r *sftp.Request) error {
	box, rel, err := b.split(r)
	if err != nil {
		return err
	}
	switch r.Method {
	case "Setstat":
		return nil
	case "Mkdir", "Remove", "Rmdir":
	default:
		return fmt.Errorf("%s is not supported here: %w", strings.ToLower(r.Method), sftp.ErrSSHFxOpUnsupported)
	}
	if box == "" || rel == "." {
		return sftpErr(fmt.Errorf("%s: boxes are made with `new` and removed with `rm`: %w", r.Filepath, fleet.ErrInvalid))
	}
	if r.Method == "Mkdir" {
		return sftpErr(b.f.MkdirAll(b.ctx, b.actor, box, rel, 0o755))
	}
	return sftpErr(b.f.Remove(b.ctx, b.actor, box, rel))
}

// Filelist lists and stats; the root lists the caller's boxes without
// waking any of them.
func (b *boxFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	box, rel, err := b.split(r)
	if err != nil {
		return nil, err
	}
	switch r.Method {
	case "List":
		if box == "" {
			boxes, err := b.f.List(b.ctx, b.actor)
			if err != nil {
				return nil, sftpErr(err)
			}
			out := make(listerAt, 0, len(boxes))
			for _, bx := range boxes {
				out = append(out, boxDir(bx.Name, bx.Updated))
			}
			return out, nil
		}
		list, err := b.f.ReadDir(b.ctx, b.actor, box, rel)
		if err != nil {
			return nil, sftpErr(err)
		}
		out := make(listerAt, 0, len(list))
		for _, fi := range list {
			out = append(out, fileInfo{fi})
		}
		return out, nil
	case "Stat", "Lstat", "Readlink":
		if box == "" {
			return listerAt{boxDir("/", time.Time{})}, nil
		}
		if rel == "." {
			bx, err := b.f.Get(b.ctx, b.actor, box)
			if err != nil {
				return nil, sftpErr(err)
			}
			return listerAt{boxDir(bx.Name, bx.Updated)}, nil
		}
		fi, err := b.f.Stat(b.ctx, b.actor, box, rel)
		if err != nil {
			return nil, sftpErr(err)
		}
		if r.Method == "Readlink" {
			if fi.Link == "" {
				return nil, fmt.Errorf("%s is not a symlink: %w", r.Filepath, sftp.ErrSSHFxFailure)
			}
			return listerAt{fileInfo{agent.FileInfo{Name: fi.Link}}}, nil
		}
		return listerAt{fileInfo{fi}}, nil
	}
	return nil, fmt.Errorf("%s is not supported here: %w", r.Method, sftp.ErrSSHFxOpUnsupported)
}

func boxDir(name string, mtime time.Time) fileInfo {
	return fileInfo{agent.FileInfo{Name: name, Mode: fs.ModeDir | 0o755, ModTime: mtime}}
}

// fileInfo is an agent.FileInfo as an os.FileInfo.
type fileInfo struct{ fi agent.FileInfo }

func (f fileInfo) Name() string       { return f.fi.Name }
func (f fileInfo) Size() int64        { return f.fi.Size }
func (f fileInfo) Mode() fs.FileMode  { return f.fi.Mode }
func (f fileInfo) ModTime() time.Time { return f.fi.ModTime }
func (f fileInfo) IsDir() bool        { return f.fi.IsDir() }
func (f fileInfo) Sys() any           { return nil }

type listerAt []os.FileInfo

func (l listerAt) ListAt(dst []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(dst, l[off:])
	if n < len(dst) {
		return n, io.EOF
	}
	return n, nil
}

// streamWindow is how far back a streamReaderAt can serve: SFTP clients
// keep many reads in flight and the server may answer them out of order.
const streamWindow = 16 << 20

// streamReaderAt serves ReadAt from a stream read once, front to back,
// keeping the last streamWindow bytes for reads that arrive late.
type streamReaderAt struct {
	mu     sync.Mutex
	rc     io.ReadCloser
	window int    // bytes kept behind the newest read
	buf    []byte // bytes [base, base+len(buf)) of the stream
	base   int64
	err    error // the stream's end (io.EOF) or failure
	chunk  [256 << 10]byte
}

func newStreamReaderAt(rc io.ReadCloser) *streamReaderAt {
	return &streamReaderAt{rc: rc, window: streamWindow}
}

func (s *streamReaderAt) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < s.base {
		return 0, fmt.Errorf("read at %d: before the stream window (%d): %w", off, s.base, sftp.ErrSSHFxFailure)
	}
	want := off + int64(len(p))
	chunk := s.chunk[:]
	for s.base+int64(len(s.buf)) < want && s.err == nil {
		n, err := s.rc.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if err != nil {
			s.err = err
		}
		// Compact only at twice the window: copying the window on every
		// read made SFTP downloads quadratic (5 MB/s for 50 MB).
		if len(s.buf) > 2*s.window {
			drop := min(int64(len(s.buf)-s.window), off-s.base)
			if drop > 0 {
				s.buf = append(make([]byte, 0, 2*s.window+len(chunk)), s.buf[drop:]...)
				s.base += drop
			}
		}
	}
	end := s.base + int64(len(s.buf))
	if off >= end {
		if s.err == io.EOF || s.err == nil {
			return 0, io.EOF
		}
		return 0, s.err
	}
	n := copy(p, s.buf[off-s.base:])
	if n < len(p) {
		if s.err == io.EOF {
			return n, io.EOF
		}
		return n, s.err
	}
	return n, nil
}

func (s *streamReaderAt) Close() error { return s.rc.Close() }

// maxPending bounds writes that arrived ahead of the stream's position.
const maxPending = 64 << 20

// streamWriterAt turns WriteAt calls (possibly out of order) into one
// stream consumed by write; Close waits for write's result.
type streamWriterAt struct {
	mu       sync.Mutex
	pw       *io.PipeWriter
	pos      int64
	pending  map[int64][]byte
	held     int
	done     chan struct{}
	writeErr error
}

func newStreamWriterAt(write func(io.Reader) error) *streamWriterAt {
	pr, pw := io.Pipe()
	w := &streamWriterAt{pw: pw, pending: map[int64][]byte{}, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.writeErr = write(pr)
		_ = pr.CloseWithError(errors.New("write ended"))
	}()
	return w
}

func (w *streamWriterAt) WriteAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case off < w.pos:
		return 0, fmt.Errorf("write at %d: already written up to %d: %w", off, w.pos, sftp.ErrSSHFxOpUnsupported)
	case off > w.pos:
		if w.held+len(p) > maxPending {
			return 0, fmt.Errorf("write at %d: too far ahead of %d: %w", off, w.pos, sftp.ErrSSHFxOpUnsupported)
		}
		w.pending[off] = append([]byte(nil), p...)
		w.held += len(p)
		return len(p), nil
	}
	if err := w.put(p); err != nil {
		return 0, err
	}
	for {
		next, ok := w.pending[w.pos]
		if !ok {
			return len(p), nil
		}
		delete(w.pending, w.pos)
		w.held -= len(next)
		if err := w.put(next); err != nil {
			return 0, err
		}
	}
}

func (w *streamWriterAt) put(p []byte) error {
	n, err := w.pw.Write(p)
	w.pos += int64(n)
	if err != nil {
		<-w.done
		if w.writeErr != nil {
			return w.writeErr
		}
		return sftpErr(err)
	}
	return nil
}

func (w *streamWriterAt) Close() error {
	w.mu.Lock()
	gap := len(w.pending) > 0
	w.mu.Unlock()
	if gap {
		_ = w.pw.CloseWithError(errors.New("upload has a gap"))
		<-w.done
		return fmt.Errorf("upload ended with a gap at %d: %w", w.pos, sftp.ErrSSHFxFailure)
	}
	_ = w.pw.Close()
	<-w.done
	return w.writeErr
}
