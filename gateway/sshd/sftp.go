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

	"charm.land/ssh"
	"github.com/pkg/sftp"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
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

	mu    sync.Mutex
	reads map[string]*spool // open reads by sftp path
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
	if err == nil {
		return nil
	}
	switch errkind.Of(err) {
	case errkind.NotFound:
		return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxNoSuchFile)
	case errkind.Invalid, errkind.Forbidden:
		return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxPermissionDenied)
	}
	return fmt.Errorf("%s: %w", err.Error(), sftp.ErrSSHFxFailure)
}

func (b *boxFS) split(r *sftp.Request) (string, string, error) {
	box, rel, err := splitBoxPath(r.Filepath)
	return box, rel, sftpErr(err)
}

// Fileread serves a file out of the box: its redacted bytes, spooled as
// they arrive so that reads at any offset (clients keep many in flight, and
// answers may come out of order) and an fstat of the open file (the size
// served, not the size in the box) agree with one another.
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
	sp, err := newSpool(rc, 0)
	if err != nil {
		return nil, sftpErr(err)
	}
	return b.opened(r.Filepath, sp), nil
}

// opened remembers sp as the open read of p until it is closed: a stat of
// p meanwhile (pkg/sftp turns an fstat into one) reports the size served.
func (b *boxFS) opened(p string, sp *spool) io.ReaderAt {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reads == nil {
		b.reads = map[string]*spool{}
	}
	b.reads[p] = sp
	return &openRead{spool: sp, close: func() {
		b.mu.Lock()
		if b.reads[p] == sp {
			delete(b.reads, p)
		}
		b.mu.Unlock()
	}}
}

// openSize is the served size of p while it is open for reading.
func (b *boxFS) openSize(p string) (int64, bool, error) {
	b.mu.Lock()
	sp := b.reads[p]
	b.mu.Unlock()
	if sp == nil {
		return 0, false, nil
	}
	n, err := sp.Size()
	return n, true, err
}

// openRead is a spool as an open sftp file.
type openRead struct {
	*spool
	close func()
}

func (o *openRead) Close() error {
	o.close()
	return o.spool.Close()
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
			out = append(out, fileInfo{fi}) // names as the core redacted them
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
			if fi.Link.String() == "" {
				return nil, fmt.Errorf("%s is not a symlink: %w", r.Filepath, sftp.ErrSSHFxFailure)
			}
			return listerAt{fileInfo{fleet.FileInfo{Name: fi.Link}}}, nil
		}
		if n, ok, err := b.openSize(r.Filepath); ok {
			if err != nil {
				return nil, sftpErr(err)
			}
			fi.Size = n
		}
		return listerAt{fileInfo{fi}}, nil
	}
	return nil, fmt.Errorf("%s is not supported here: %w", r.Method, sftp.ErrSSHFxOpUnsupported)
}

func boxDir(name string, mtime time.Time) os.FileInfo {
	return dirInfo{name: name, mtime: mtime}
}

// dirInfo is the root or a box as a directory: names the caller gave or
// the core's box names, not text from inside a box.
type dirInfo struct {
	name  string
	mtime time.Time
}

func (d dirInfo) Name() string       { return d.name }
func (d dirInfo) Size() int64        { return 0 }
func (d dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o755 }
func (d dirInfo) ModTime() time.Time { return d.mtime }
func (d dirInfo) IsDir() bool        { return true }
func (d dirInfo) Sys() any           { return nil }

// fileInfo is a fleet.FileInfo (name redacted) as an os.FileInfo.
type fileInfo struct{ fi fleet.FileInfo }

func (f fileInfo) Name() string       { return f.fi.Name.String() }
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

// spool is a file's redacted content on its way out of a box, written to
// an unlinked temporary file as it arrives. The redacted length is known
// only at the end, so what must agree with the bytes sent reads the spool:
// SFTP's reads at any offset (served as soon as those bytes are in), the
// size of an open file, scp's announced length. It costs the gateway disk
// the size of the file, for as long as it is open.
type spool struct {
	f    *os.File
	rc   io.ReadCloser
	max  int64 // 0: no cap beyond the box's own disk
	done chan struct{}

	mu   sync.Mutex
	cond *sync.Cond
	n    int64 // bytes in f
	err  error // io.EOF once complete, else why it stopped
}

// newSpool starts copying rc into a new spool; past max bytes (when > 0)
// it stops with an error.
func newSpool(rc io.ReadCloser, max int64) (*spool, error) {
	f, err := os.CreateTemp("", "sbx-artifact-*")
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("spool a download: %w", err)
	}
	// Unlinked at once: nothing is left behind whatever happens.
	_ = os.Remove(f.Name())
	s := &spool{f: f, rc: rc, max: max, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.fill()
	return s, nil
}

func (s *spool) fill() {
	defer close(s.done)
	buf := make([]byte, 256<<10)
	var err error
	for err == nil {
		var n int
		n, err = s.rc.Read(buf)
		if n > 0 {
			s.mu.Lock()
			at := s.n
			s.mu.Unlock()
			if s.max > 0 && at+int64(n) > s.max {
				err = fmt.Errorf("the file is larger than %d bytes, the most served here: %w", s.max, fleet.ErrLimit)
			} else if _, werr := s.f.WriteAt(buf[:n], at); werr != nil {
				err = fmt.Errorf("spool a download: %w", werr)
			} else {
				s.mu.Lock()
				s.n += int64(n)
				s.cond.Broadcast()
				s.mu.Unlock()
			}
		}
	}
	s.mu.Lock()
	s.err = err
	s.cond.Broadcast()
	s.mu.Unlock()
}

// ReadAt waits until the bytes at off are in (or the content ends).
func (s *spool) ReadAt(p []byte, off int64) (int, error) {
	want := off + int64(len(p))
	s.mu.Lock()
	for s.n < want && s.err == nil {
		s.cond.Wait()
	}
	have, end := s.n, s.err
	s.mu.Unlock()
	if off >= have {
		if end == io.EOF {
			return 0, io.EOF
		}
		return 0, end
	}
	n, err := s.f.ReadAt(p[:min(int64(len(p)), have-off)], off)
	if err != nil && err != io.EOF {
		return n, fmt.Errorf("spool a download: %w", err)
	}
	if n < len(p) {
		if end == io.EOF {
			return n, io.EOF
		}
		return n, end
	}
	return n, nil
}

// Size waits for the end and returns the length of the redacted content.
func (s *spool) Size() (int64, error) {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != io.EOF {
		return s.n, s.err
	}
	return s.n, nil
}

// Close stops the copy (closing the box's stream) and drops the spool.
func (s *spool) Close() error {
	s.rc.Close()
	<-s.done
	return s.f.Close()
}

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
