package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// Client is the host's end of one agent connection. It is safe for concurrent
// use; every call runs on its own yamux stream.
type Client struct {
	sess    *yamux.Session
	nextID  atomic.Uint64
	oldExec atomic.Bool // the guest refused opExecStream
}

// Connect performs the nonce handshake on conn and starts yamux over it. On
// failure conn is closed. ctx bounds the handshake only.
func Connect(ctx context.Context, conn io.ReadWriteCloser) (*Client, error) {
	hc, err := hostHandshake(ctx, conn)
	if err != nil {
		return nil, err
	}
	sess, err := yamux.Client(JoinFrames(hc), YamuxConfig(true))
	if err != nil {
		hc.Close()
		return nil, fmt.Errorf("agent: start yamux: %w", err)
	}
	return &Client{sess: sess}, nil
}

func YamuxConfig(keepAlive bool) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = keepAlive
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.LogOutput = nil
	cfg.Logger = log.New(io.Discard, "", 0)
	return cfg
}

// Close ends the connection; running calls fail with ErrClosed.
func (c *Client) Close() error { return c.sess.Close() }

// Done is closed when the connection is gone (closed, or the guest went away).
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// call opens a stream, sends req and reads the reply header. The stream is
// returned open for calls that stream data; it is closed when ctx ends.
func (c *Client) call(ctx context.Context, req Request) (*yamux.Stream, Reply, func() bool, error) {
	if req.ID == 0 {
		req.ID = c.nextID.Add(1)
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		if c.sess.IsClosed() {
			err = ErrClosed
		}
		return nil, Reply{}, nil, fmt.Errorf("agent %s: open stream: %w", req.Op, err)
	}
	stop := context.AfterFunc(ctx, func() { st.Close() })
	fail := func(err error) (*yamux.Stream, Reply, func() bool, error) {
		stop()
		st.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, Reply{}, nil, fmt.Errorf("agent %s %q: %w", req.Op, req.Path, err)
	}
	if err := WriteFrame(st, req); err != nil {
		return fail(err)
	}
	var rep Reply
	if err := ReadFrame(st, &rep); err != nil {
		return fail(err)
	}
	if rep.ID != req.ID {
		return fail(fmt.Errorf("reply id %d does not match request id %d", rep.ID, req.ID))
	}
	if rep.Err != nil {
		stop()
		st.Close()
		return nil, Reply{}, nil, rep.Err.err(req.Op, req.Path)
	}
	return st, rep, stop, nil
}

// simple runs a call that has no stream after its reply.
func (c *Client) simple(ctx context.Context, req Request) (Reply, error) {
	st, rep, stop, err := c.call(ctx, req)
	if err != nil {
		return Reply{}, err
	}
	stop()
	st.Close()
	return rep, nil
}

// Ping asks the guest for its health; the first answer after boot is the
// "first agent reply".
func (c *Client) Ping(ctx context.Context) (Health, error) {
	rep, err := c.simple(ctx, Request{Op: OpPing})
	if err != nil {
		return Health{}, err
	}
	if rep.Health == nil {
		return Health{}, errors.New("agent ping: empty reply")
	}
	return *rep.Health, nil
}

// maxDirEntries bounds what ReadDir accepts from the guest.
const maxDirEntries = 1 << 20

// Stat describes path (relative to /workspace); symlinks are followed inside
// /workspace only.
func (c *Client) Stat(ctx context.Context, path string) (FileInfo, error) {
	rep, err := c.simple(ctx, Request{Op: OpStat, Path: path})
	if err != nil {
		return FileInfo{}, err
	}
	if rep.Info == nil {
		return FileInfo{}, fmt.Errorf("agent stat %q: empty reply", path)
	}
	return *rep.Info, nil
}

// ReadDir lists a directory, sorted by name; symlinks are reported, not followed.
func (c *Client) ReadDir(ctx context.Context, path string) ([]FileInfo, error) {
	req := Request{ID: c.nextID.Add(1), Op: OpReadDir, Path: path}
	st, rep, stop, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	defer stop()
	defer st.Close()
	infos := rep.Infos
	for rep.More {
		rep = Reply{}
		if err := ReadFrame(st, &rep); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("agent readdir %q: %w", path, err)
		}
		if rep.ID != req.ID {
			return nil, fmt.Errorf("agent readdir %q: reply id %d does not match request id %d", path, rep.ID, req.ID)
		}
		if rep.Err != nil {
			return nil, rep.Err.err(OpReadDir, path)
		}
		infos = append(infos, rep.Infos...)
		if len(infos) > maxDirEntries { // the guest is not trusted to stop
			return nil, fmt.Errorf("agent readdir %q: more than %d entries", path, maxDirEntries)
		}
	}
	return infos, nil
}

// MkdirAll creates path and its missing parents.
func (c *Client) MkdirAll(ctx context.Context, path string, mode fs.FileMode) error {
	_, err := c.simple(ctx, Request{Op: OpMkdirAll, Path: path, Mode: uint32(mode.Perm())})
	return err
}

// Remove deletes path; a directory is removed with everything in it. Symlinks
// are removed, never followed.
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.simple(ctx, Request{Op: OpRemove, Path: path})
	return err
}

// SetClock sets the guest's wall clock (after boot and after every wake).
func (c *Client) SetClock(ctx context.Context, t time.Time) error {
	_, err := c.simple(ctx, Request{Op: OpClock, Time: t.UnixNano()})
	return err
}

// Reseed mixes seed into the guest's entropy pool (a restored snapshot has a
// cloned RNG state).
func (c *Client) Reseed(ctx context.Context, seed []byte) error {
	_, err := c.simple(ctx, Request{Op: OpReseed, Data: seed})
	return err
}

// Shutdown asks the guest to sync its disks and power off. The connection
// usually ends before or right after the reply.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.simple(ctx, Request{Op: OpShutdown})
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrClosed) ||
		errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, net.ErrClosed)) {
		return nil // the guest went down before the reply got out
	}
	return err
}

// ReadFile streams the file at path. The reader fails with
// io.ErrUnexpectedEOF if the guest stops half-way.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return c.download(ctx, Request{Op: OpRead, Path: path})
}

// TarOut streams path as a tar archive: a directory's entries are named
// relative to it, a file is one entry named by its base name. Symlinks are
// archived as links, never followed.
func (c *Client) TarOut(ctx context.Context, path string) (io.ReadCloser, error) {
	return c.download(ctx, Request{Op: OpTarOut, Path: path})
}

func (c *Client) download(ctx context.Context, req Request) (io.ReadCloser, error) {
	st, _, stop, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	return &downloadReader{r: NewChunkReader(st), st: st, stop: stop}, nil
}

type downloadReader struct {
	r    io.Reader
	st   *yamux.Stream
	stop func() bool
	once sync.Once
}

func (d *downloadReader) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *downloadReader) Close() error {
	d.once.Do(func() {
		d.stop()
		d.st.Close()
	})
	return nil
}

// WriteFile stores r's bytes at path with mode, atomically: the guest writes
// a temporary file, syncs it and renames it over path. If r fails the file is
// left as it was.
func (c *Client) WriteFile(ctx context.Context, path string, mode fs.FileMode, r io.Reader) error {
	return c.upload(ctx, Request{Op: OpWrite, Path: path, Mode: uint32(mode.Perm())}, r)
}

// TarIn unpacks the tar archive r into dir. Entries that would land outside
// /workspace (.., absolute names, through symlinks) fail the call.
func (c *Client) TarIn(ctx context.Context, dir string, r io.Reader) error {
	return c.upload(ctx, Request{Op: OpTarIn, Path: dir}, r)
}

// upload sends req, then r as chunks, then waits for the final reply. The
// first reply says the guest accepted the call; the final one may come early
// when the guest gives up (then the rest of r is not sent).
func (c *Client) upload(ctx context.Context, req Request, r io.Reader) error {
	req.ID = c.nextID.Add(1)
	st, _, stop, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	defer stop()
	defer st.Close()
	result := make(chan error, 1)
	go func() {
		var rep Reply
		err := ReadFrame(st, &rep)
		switch {
		case err != nil:
			err = fmt.Errorf("agent %s %q: read result: %w", req.Op, req.Path, err)
		case rep.ID != req.ID:
			err = fmt.Errorf("agent %s %q: reply id %d does not match request id %d", req.Op, req.Path, rep.ID, req.ID)
		default:
			err = rep.Err.err(req.Op, req.Path)
		}
		if err != nil {
			st.Close() // stop sending: the guest is no longer reading
		}
		result <- err
	}()
	cw := NewChunkWriter(st)
	_, err = cw.ReadFrom(r)
	if err == nil {
		err = cw.Close()
	}
	if err != nil {
		// Without the end marker the guest discards what it got.
		st.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("agent %s %q: %w", req.Op, req.Path, ctx.Err())
		}
		select { // the guest's reason, when it is why the stream closed
		case rerr := <-result:
			if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, yamux.ErrStreamClosed) {
				return rerr
			}
		case <-time.After(time.Second):
		}
		return fmt.Errorf("agent %s %q: send data: %w", req.Op, req.Path, err)
	}
	err = <-result
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("agent %s %q: %w", req.Op, req.Path, ctx.Err())
	}
	return err
}

// Watch reports changes of path (created, changed, removed) until ctx ends;
// the channel is closed then, or when the connection breaks.
func (c *Client) Watch(ctx context.Context, path string) (<-chan WatchEvent, error) {
	st, _, stop, err := c.call(ctx, Request{Op: OpWatch, Path: path})
	if err != nil {
		return nil, err
	}
	ch := make(chan WatchEvent, 16)
	go func() {
		defer close(ch)
		defer stop()
		defer st.Close()
		for {
			var rep Reply
			if err := ReadFrame(st, &rep); err != nil || rep.Event == nil {
				return
			}
			select {
			case ch <- *rep.Event:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Process is a process started by Exec.
type Process struct {
	c   *Client
	id  uint64
	pid int
	// One-stream exec: st carries everything; input and output go through
	// in, out and errOut.
	st     *yamux.Stream
	in     *stdinWriter
	out    *outPipe
	errOut *outPipe
	// Four-stream exec (agents that predate opExecStream).
	ctl       *yamux.Stream
	stdin     *yamux.Stream
	stdout    *yamux.Stream
	stderr    *yamux.Stream
	ctlMu     sync.Mutex // serialises control frames and guards acks
	acks      map[uint64]chan *wireError
	waitErr   error
	exit      ExitStatus
	done      chan struct{}
	closeOnce sync.Once
}

// Exec starts a process. Its output must be read (or the process blocks once
// the host's buffers are full); ctx bounds the start only — use Signal to end it.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (*Process, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("agent exec: empty argv")
	}
	if !c.oldExec.Load() {
		p, err := c.execStream(ctx, req)
		if !errors.Is(err, errOldAgent) {
			return p, err
		}
		c.oldExec.Store(true) // this connection's agent is older: ask it once
	}
	return c.execFourStreams(ctx, req)
}

// execFourStreams is the exec of agents that predate opExecStream: a control
// stream plus one stream per stdio file, paired by the exec's id.
func (c *Client) execFourStreams(ctx context.Context, req ExecRequest) (*Process, error) {
	id := c.nextID.Add(1)
	p := &Process{c: c, id: id, done: make(chan struct{}), acks: map[uint64]chan *wireError{}}
	open := func(fd int) (*yamux.Stream, error) {
		st, err := c.sess.OpenStream()
		if err != nil {
			return nil, fmt.Errorf("agent exec %q: open stream: %w", req.Argv[0], err)
		}
		if err := WriteFrame(st, Request{ID: c.nextID.Add(1), Op: OpAttach, Exe: id, FD: fd}); err != nil {
			st.Close()
			return nil, fmt.Errorf("agent exec %q: attach fd %d: %w", req.Argv[0], fd, err)
		}
		return st, nil
	}
	closeAll := func() {
		for _, st := range []*yamux.Stream{p.ctl, p.stdin, p.stdout, p.stderr} {
			if st != nil {
				st.Close()
			}
		}
	}
	var err error
	if p.ctl, err = c.sess.OpenStream(); err != nil {
		return nil, fmt.Errorf("agent exec %q: open stream: %w", req.Argv[0], err)
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer stop()
	r := req
	if err := WriteFrame(p.ctl, Request{ID: id, Op: OpExec, Exec: &r}); err != nil {
		closeAll()
		return nil, fmt.Errorf("agent exec %q: %w", req.Argv[0], err)
	}
	for fd, dst := range []**yamux.Stream{&p.stdin, &p.stdout, &p.stderr} {
		if *dst, err = open(fd); err != nil {
			closeAll()
			return nil, err
		}
	}
	var rep Reply
	if err := ReadFrame(p.ctl, &rep); err != nil {
		closeAll()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("agent exec %q: %w", req.Argv[0], err)
	}
	if rep.ID != id {
		closeAll()
		return nil, fmt.Errorf("agent exec %q: reply id %d does not match request id %d", req.Argv[0], rep.ID, id)
	}
	if rep.Err != nil {
		closeAll()
		return nil, rep.Err.err(OpExec, req.Argv[0])
	}
	p.pid = rep.PID
	go p.waitLoop()
	return p, nil
}

func (p *Process) waitLoop() {
	defer close(p.done)
	for {
		var rep Reply
		if err := ReadFrame(p.ctl, &rep); err != nil {
			p.waitErr = fmt.Errorf("agent exec pid %d: connection lost before exit: %w", p.pid, err)
			return
		}
		if rep.Exit != nil {
			p.exit = *rep.Exit
			return
		}
		p.ctlMu.Lock()
		ack := p.acks[rep.ID]
		delete(p.acks, rep.ID)
		p.ctlMu.Unlock()
		if ack != nil {
			ack <- rep.Err
		}
	}
}

// oneStream reports whether the process runs on the one-stream exec.
func (p *Process) oneStream() bool { return p.out != nil }

// PID is the process id in the guest.
func (p *Process) PID() int { return p.pid }

// Stdin is the process's standard input; Close sends EOF (with a TTY, ^D).
func (p *Process) Stdin() io.WriteCloser {
	if p.oneStream() {
		return p.in
	}
	return p.stdin
}

// Stdout is the process's standard output, or the terminal's output with a TTY.
func (p *Process) Stdout() io.Reader {
	if p.oneStream() {
		return p.out
	}
	return p.stdout
}

// Stderr is the process's standard error; empty with a TTY.
func (p *Process) Stderr() io.Reader {
	if p.oneStream() {
		return p.errOut
	}
	return p.stderr
}

// Resize changes the terminal size of a TTY process.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.control(ctx, Request{Op: OpResize, Rows: rows, Cols: cols})
}

// Signal sends sig to the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.control(ctx, Request{Op: OpSignal, Signal: int(sig)})
}

// control sends a resize or signal frame and waits until the guest has
// applied it.
func (p *Process) control(ctx context.Context, req Request) error {
	select {
	case <-p.done:
		return fmt.Errorf("agent %s pid %d: process has exited", req.Op, p.pid)
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.oneStream() {
		// On its own stream: the exec stream's input may be blocked by a
		// process that does not read it.
		req.Exe = p.id
		_, err := p.c.simple(ctx, req)
		var aerr *Error
		if errors.As(err, &aerr) {
			aerr.Path = fmt.Sprint("pid ", p.pid)
		}
		return err
	}
	req.ID = p.c.nextID.Add(1)
	ack := make(chan *wireError, 1)
	p.ctlMu.Lock()
	p.acks[req.ID] = ack
	err := WriteFrame(p.ctl, req)
	p.ctlMu.Unlock()
	if err != nil {
		return fmt.Errorf("agent %s pid %d: %w", req.Op, p.pid, err)
	}
	select {
	case werr := <-ack:
		return werr.err(req.Op, fmt.Sprint("pid ", p.pid))
	case <-p.done:
		// The process ended first. The old agent writes the exit status
		// and the signal's ack from two goroutines, so the exit may come
		// first even when this very signal ended the process: that is the
		// signal applied, not refused.
		select {
		case werr := <-ack:
			return werr.err(req.Op, fmt.Sprint("pid ", p.pid))
		default:
		}
		if req.Op == OpSignal && p.waitErr == nil && p.exit.Signal == unix.SignalName(syscall.Signal(req.Signal)) {
			return nil
		}
		return fmt.Errorf("agent %s pid %d: process has exited", req.Op, p.pid)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until the process has exited and its output streams are
// complete, then returns how it ended.
//
// Output already received stays readable from Stdout and Stderr after Wait;
// the streams are released here, so every Exec needs its Wait.
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	if p.oneStream() {
		p.closeOnce.Do(func() {
			if p.st != nil {
				p.st.Close()
			}
		})
		return p.exit, p.waitErr
	}
	p.closeOnce.Do(func() {
		// The exit frame comes after the output streams ended, so all their
		// data is buffered here already; closing them frees both sides.
		for _, st := range []*yamux.Stream{p.stdin, p.stdout, p.stderr, p.ctl} {
			st.Close()
		}
	})
	return p.exit, p.waitErr
}
