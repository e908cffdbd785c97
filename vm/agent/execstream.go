package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// One-stream exec (opExecStream). After the request and its reply (the pid,
// or an error), both sides exchange typed frames on the same yamux stream: a
// kind byte, a 4-byte big-endian payload length, the payload.
const (
	frameStdin     byte = 'i' // host → guest: input bytes
	frameStdinEOF  byte = 'I' // host → guest: end of input (^D with a tty)
	frameStdout    byte = 'o' // guest → host: output bytes (a tty's output)
	frameStdoutEOF byte = 'O'
	frameStderr    byte = 'e'
	frameStderrEOF byte = 'E'
	frameExit      byte = 'x' // guest → host: JSON ExitStatus; the last frame, it ends both outputs
)

const (
	frameHead = 5 // kind + length
	// maxExecData bounds one frame's payload; larger frames are refused unread.
	maxExecData = pumpBuf
	// outLimit bounds the output the host buffers per stream for a reader
	// that does not keep up; past it the host stops reading the exec stream,
	// so yamux's window holds the guest back and the process blocks on its
	// pipe, as it would on a terminal.
	outLimit = 1 << 20
	// maxSignalName bounds the signal name in an exit frame.
	maxSignalName = 32
)

// errOldAgent says the guest predates opExecStream.
var errOldAgent = errors.New("agent does not know the one-stream exec")

// putFrameHead fills the first frameHead bytes of b for a payload that
// follows them.
func putFrameHead(b []byte, kind byte) []byte {
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:frameHead], uint32(len(b)-frameHead))
	return b
}

// frameReader decodes typed frames, holding at most one payload of
// maxExecData bytes.
type frameReader struct {
	r    io.Reader
	head [frameHead]byte
	buf  []byte
}

// next returns the next frame; the payload is valid until the following
// call. io.EOF means the stream ended cleanly between frames.
func (fr *frameReader) next() (kind byte, payload []byte, err error) {
	if _, err := io.ReadFull(fr.r, fr.head[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(fr.head[1:])
	if n > maxExecData {
		return 0, nil, fmt.Errorf("frame %q of %d bytes exceeds %d", fr.head[0], n, maxExecData)
	}
	if uint32(cap(fr.buf)) < n {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("frame %q body (%d bytes): %w", fr.head[0], n, err)
	}
	return fr.head[0], b, nil
}

// --- guest side ---

// execStream runs one process with all its traffic on st.
func (c *connState) execStream(st *yamux.Stream, req request) {
	s := c.srv
	fail := func(err error) {
		_ = writeFrame(st, reply{ID: req.ID, Err: toWire(err)})
	}
	if req.Exec == nil || len(req.Exec.Argv) == 0 {
		fail(fmt.Errorf("exec: empty argv: %w", errInvalid))
		return
	}
	c.mu.Lock()
	_, dup := c.procs[req.ID]
	if !dup {
		c.procs[req.ID] = nil // reserved until started
	}
	c.mu.Unlock()
	if dup {
		fail(fmt.Errorf("exec id %d already in use: %w", req.ID, errInvalid))
		return
	}
	p, err := s.startProcess(*req.Exec)
	c.mu.Lock()
	if err != nil {
		delete(c.procs, req.ID)
	} else {
		c.procs[req.ID] = p
	}
	c.mu.Unlock()
	if err != nil {
		fail(err)
		return
	}
	// The exec is no longer addressable once the process is gone, before
	// the host hears its exit: a resize or signal after Wait is refused.
	gone := func() {
		c.mu.Lock()
		delete(c.procs, req.ID)
		c.mu.Unlock()
	}
	defer gone()
	// As with the four-stream exec, a failed write does not end the process.
	if err := writeFrame(st, reply{ID: req.ID, PID: p.pid}); err != nil {
		s.log.Debug("agent: exec reply", "pid", p.pid, "err", err)
	}
	p.runStream(st, s.log, gone)
}

// control applies a resize or signal sent on its own stream to a process
// started by execStream on this connection.
func (c *connState) control(req request) error {
	c.mu.Lock()
	p := c.procs[req.Exe]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s: no running process for exec %d: %w", req.Op, req.Exe, os.ErrNotExist)
	}
	return p.control(req)
}

// runStream pumps input from st and output and the exit status to st,
// calling exited before it sends the status.
func (p *process) runStream(st *yamux.Stream, log *slog.Logger, exited func()) {
	defer p.closeAll()
	var mu sync.Mutex // one frame per Write, whole
	send := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := st.Write(b)
		return err
	}
	go p.feedStdin(st)

	var outs sync.WaitGroup
	var pumps []*pump
	out := func(src *os.File, kind, eof byte) {
		pm := &pump{src: src, tty: src == p.tty}
		pumps = append(pumps, pm)
		outs.Add(1)
		go func() {
			defer outs.Done()
			pm.copy(frameHead, func(b []byte) error { return send(putFrameHead(b, kind)) })
			// The exit frame ends every output; an EOF frame is only worth
			// its write while the process runs on.
			if !p.gone.Load() {
				var b [frameHead]byte
				_ = send(putFrameHead(b[:], eof))
			}
		}()
	}
	if p.tty != nil {
		out(p.tty, frameStdout, frameStdoutEOF)
	} else {
		out(p.stdout, frameStdout, frameStdoutEOF)
		out(p.stderr, frameStderr, frameStderrEOF)
	}
	exit := p.finish(pumps, &outs)
	exited()
	b, _ := json.Marshal(exit)
	if err := send(putFrameHead(append(make([]byte, frameHead, frameHead+len(b)), b...), frameExit)); err != nil {
		log.Debug("agent: send exit", "pid", p.pid, "err", err)
	}
}

// feedStdin copies input frames to the process until the host ends the
// stream. It reads the stream to its end even when the process no longer
// takes input, so a host writing to a finished process is never blocked.
func (p *process) feedStdin(st io.Reader) {
	w := p.stdin
	if p.tty != nil {
		w = p.tty
	}
	open := true
	end := func() {
		if !open {
			return
		}
		open = false
		if p.tty != nil {
			_, _ = p.tty.Write([]byte{4})
		} else {
			p.stdin.Close()
		}
	}
	defer end()
	fr := frameReader{r: st}
	for {
		kind, b, err := fr.next()
		if err != nil {
			return
		}
		switch kind {
		case frameStdin:
			if open {
				if _, err := w.Write(b); err != nil && p.tty == nil {
					end() // the process closed its input: drop the rest
				}
			}
		case frameStdinEOF:
			end()
		}
	}
}

// --- host side ---

// execStream starts req on one stream. errOldAgent means the guest's agent
// predates it and the caller should use the four-stream exec.
func (c *Client) execStream(ctx context.Context, req ExecRequest) (*Process, error) {
	id := c.nextID.Add(1)
	st, err := c.sess.OpenStream()
	if err != nil {
		if c.sess.IsClosed() {
			err = ErrClosed
		}
		return nil, fmt.Errorf("agent exec %q: open stream: %w", req.Argv[0], err)
	}
	stop := context.AfterFunc(ctx, func() {
		_ = st.SetReadDeadline(time.Now())
		st.Close()
	})
	fail := func(err error) (*Process, error) {
		stop()
		st.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("agent exec %q: %w", req.Argv[0], err)
	}
	r := req
	if err := writeFrame(st, request{ID: id, Op: opExecStream, Exec: &r}); err != nil {
		return fail(err)
	}
	var rep reply
	if err := readFrame(st, &rep); err != nil {
		return fail(err)
	}
	if rep.ID != id {
		return fail(fmt.Errorf("reply id %d does not match request id %d", rep.ID, id))
	}
	if rep.Err != nil {
		stop()
		st.Close()
		if rep.Err.Code == codeInvalid && strings.HasPrefix(rep.Err.Msg, fmt.Sprintf("unknown op %q", opExecStream)) {
			return nil, errOldAgent
		}
		return nil, rep.Err.err(opExec, req.Argv[0])
	}
	if !stop() {
		return fail(ctx.Err())
	}
	p := newStreamProcess(c, id, rep.PID, st, req.TTY)
	go p.demux(st)
	go func() { // a lost connection frees readers and Wait even when the output is full
		select {
		case <-p.done:
		case <-c.sess.CloseChan():
			p.abort(fmt.Errorf("agent exec pid %d: %w", p.pid, ErrClosed))
		}
	}()
	return p, nil
}

func newStreamProcess(c *Client, id uint64, pid int, st *yamux.Stream, tty bool) *Process {
	p := &Process{c: c, id: id, pid: pid, st: st, done: make(chan struct{}),
		out: newOutPipe(outLimit), errOut: newOutPipe(outLimit)}
	p.in = &stdinWriter{w: st}
	if tty {
		p.errOut.closeWrite() // a tty has one output
	}
	return p
}

// demux reads the guest's frames into the output pipes until the exit frame.
func (p *Process) demux(r io.Reader) {
	defer close(p.done)
	if err := p.readFrames(r); err != nil {
		p.waitErr = fmt.Errorf("agent exec pid %d: %w", p.pid, err)
		p.abort(p.waitErr)
	}
}

// readFrames checks every frame: the guest is not trusted to follow the
// protocol, nor to bound what it sends.
func (p *Process) readFrames(r io.Reader) error {
	fr := frameReader{r: r}
	for {
		kind, b, err := fr.next()
		if err != nil {
			return fmt.Errorf("connection lost before exit: %w", err)
		}
		switch kind {
		case frameStdout, frameStderr:
			pipe, name := p.out, "stdout"
			if kind == frameStderr {
				pipe, name = p.errOut, "stderr"
			}
			if err := pipe.write(b); errors.Is(err, errPipeEnded) {
				return fmt.Errorf("bad frame from guest: %s data after its end", name)
			} else if err != nil {
				return err
			}
		case frameStdoutEOF, frameStderrEOF:
			if len(b) != 0 {
				return fmt.Errorf("bad frame from guest: end of output with %d bytes", len(b))
			}
			if kind == frameStdoutEOF {
				p.out.closeWrite()
			} else {
				p.errOut.closeWrite()
			}
		case frameExit:
			var exit ExitStatus
			if err := json.Unmarshal(b, &exit); err != nil {
				return fmt.Errorf("bad frame from guest: exit status: %w", err)
			}
			if len(exit.Signal) > maxSignalName || strings.ContainsFunc(exit.Signal, notNameRune) {
				return fmt.Errorf("bad frame from guest: signal name %q", exit.Signal)
			}
			p.exit = exit
			p.out.closeWrite()
			p.errOut.closeWrite()
			return nil
		default:
			return fmt.Errorf("bad frame from guest: unknown kind %q", kind)
		}
	}
}

// notNameRune is false for the runes of a signal name like "SIGINT".
func notNameRune(r rune) bool {
	return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
}

// abort fails blocked and later reads of the outputs and unblocks demux.
func (p *Process) abort(err error) {
	p.out.abort(err)
	p.errOut.abort(err)
}

// stdinWriter sends input frames; Close sends the end of input.
type stdinWriter struct {
	w      io.Writer
	mu     sync.Mutex
	closed bool
	buf    []byte
}

func (s *stdinWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, io.ErrClosedPipe
	}
	written := 0
	for len(b) > 0 {
		n := min(len(b), maxExecData)
		if s.buf == nil {
			s.buf = make([]byte, frameHead+maxExecData)
		}
		f := s.buf[:frameHead+n]
		copy(f[frameHead:], b[:n])
		// yamux blocks here while the guest's window is full: the process
		// is not reading its input.
		if _, err := s.w.Write(putFrameHead(f, frameStdin)); err != nil {
			return written, err
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

func (s *stdinWriter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var b [frameHead]byte
	_, err := s.w.Write(putFrameHead(b[:], frameStdinEOF))
	return err
}

// errPipeEnded is a write after closeWrite.
var errPipeEnded = errors.New("write after end of output")

// outPipe buffers one output stream on the host, up to a limit: write blocks
// while it is full.
type outPipe struct {
	mu    sync.Mutex
	cond  sync.Cond
	buf   []byte
	off   int // read position in buf
	limit int
	ended bool  // the writer is done: reads return io.EOF after buf
	err   error // aborted: reads and writes fail with err
}

func newOutPipe(limit int) *outPipe {
	o := &outPipe{limit: limit}
	o.cond.L = &o.mu
	return o
}

func (o *outPipe) write(b []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(b) > 0 {
		if o.err != nil {
			return o.err
		}
		if o.ended {
			return errPipeEnded
		}
		room := o.limit - (len(o.buf) - o.off)
		if room <= 0 {
			o.cond.Wait()
			continue
		}
		if o.off > 0 && len(o.buf)+min(room, len(b)) > cap(o.buf) {
			o.buf = o.buf[:copy(o.buf, o.buf[o.off:])]
			o.off = 0
		}
		n := min(room, len(b))
		o.buf = append(o.buf, b[:n]...)
		b = b[n:]
		o.cond.Broadcast()
	}
	return nil
}

func (o *outPipe) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		if o.off < len(o.buf) {
			n := copy(p, o.buf[o.off:])
			o.off += n
			if o.off == len(o.buf) {
				o.buf, o.off = o.buf[:0], 0
			}
			o.cond.Broadcast()
			return n, nil
		}
		if o.err != nil {
			return 0, o.err
		}
		if o.ended {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		o.cond.Wait()
	}
}

// closeWrite ends the output: reads return io.EOF once buffered data is read.
func (o *outPipe) closeWrite() {
	o.mu.Lock()
	o.ended = true
	o.cond.Broadcast()
	o.mu.Unlock()
}

// abort fails blocked and later calls with err; buffered data is dropped.
func (o *outPipe) abort(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.buf, o.off = nil, 0
	o.cond.Broadcast()
	o.mu.Unlock()
}

// buffered is the number of unread bytes.
func (o *outPipe) buffered() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.buf) - o.off
}
