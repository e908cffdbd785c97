package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// One-stream exec (opExecStream). After the request and its reply (the pid,
// or an error), both sides exchange typed frames on the same yamux stream: a
// kind byte, a 4-byte big-endian payload length, the payload.
const (
	FrameStdin     byte = 'i' // host → guest: input bytes
	FrameStdinEOF  byte = 'I' // host → guest: end of input (^D with a tty)
	FrameStdout    byte = 'o' // guest → host: output bytes (a tty's output)
	FrameStdoutEOF byte = 'O'
	FrameStderr    byte = 'e'
	FrameStderrEOF byte = 'E'
	FrameExit      byte = 'x' // guest → host: JSON ExitStatus; the last frame, it ends both outputs
)

const (
	FrameHead = 5 // kind + length
	// MaxExecData bounds one frame's payload; larger frames are refused unread.
	// The guest's output pumps read at most this much at a time.
	MaxExecData = 32 << 10
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

// PutFrameHead fills the first frameHead bytes of b for a payload that
// follows them.
func PutFrameHead(b []byte, kind byte) []byte {
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:FrameHead], uint32(len(b)-FrameHead))
	return b
}

// FrameReader decodes typed frames, holding at most one payload of
// maxExecData bytes.
type FrameReader struct {
	r    io.Reader
	head [FrameHead]byte
	buf  []byte
}

// next returns the next frame; the payload is valid until the following
// call. io.EOF means the stream ended cleanly between frames.
// NewFrameReader decodes the typed frames on r.
func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

func (fr *FrameReader) Next() (kind byte, payload []byte, err error) {
	if _, err := io.ReadFull(fr.r, fr.head[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(fr.head[1:])
	if n > MaxExecData {
		return 0, nil, fmt.Errorf("frame %q of %d bytes exceeds %d", fr.head[0], n, MaxExecData)
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
	if err := WriteFrame(st, Request{ID: id, Op: OpExecStream, Exec: &r}); err != nil {
		return fail(err)
	}
	var rep Reply
	if err := ReadFrame(st, &rep); err != nil {
		return fail(err)
	}
	if rep.ID != id {
		return fail(fmt.Errorf("reply id %d does not match request id %d", rep.ID, id))
	}
	if rep.Err != nil {
		stop()
		st.Close()
		if rep.Err.Code == codeInvalid && strings.HasPrefix(rep.Err.Msg, fmt.Sprintf("unknown op %q", OpExecStream)) {
			return nil, errOldAgent
		}
		return nil, rep.Err.err(OpExec, req.Argv[0])
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
	fr := NewFrameReader(r)
	for {
		kind, b, err := fr.Next()
		if err != nil {
			return fmt.Errorf("connection lost before exit: %w", err)
		}
		switch kind {
		case FrameStdout, FrameStderr:
			pipe, name := p.out, "stdout"
			if kind == FrameStderr {
				pipe, name = p.errOut, "stderr"
			}
			if err := pipe.write(b); errors.Is(err, errPipeEnded) {
				return fmt.Errorf("bad frame from guest: %s data after its end", name)
			} else if err != nil {
				return err
			}
		case FrameStdoutEOF, FrameStderrEOF:
			if len(b) != 0 {
				return fmt.Errorf("bad frame from guest: end of output with %d bytes", len(b))
			}
			if kind == FrameStdoutEOF {
				p.out.closeWrite()
			} else {
				p.errOut.closeWrite()
			}
		case FrameExit:
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
		n := min(len(b), MaxExecData)
		if s.buf == nil {
			s.buf = make([]byte, FrameHead+MaxExecData)
		}
		f := s.buf[:FrameHead+n]
		copy(f[FrameHead:], b[:n])
		// yamux blocks here while the guest's window is full: the process
		// is not reading its input.
		if _, err := s.w.Write(PutFrameHead(f, FrameStdin)); err != nil {
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
	var b [FrameHead]byte
	_, err := s.w.Write(PutFrameHead(b[:], FrameStdinEOF))
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
