package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Dial ("dial") opens a TCP connection from the guest to a port on the box's
// own loopback and carries it on one stream: the request, the reply (or the
// error that kept the connection from opening), then typed frames both ways
// (FrameHead, at most MaxExecData of payload): 'd' bytes, 'D' the end of
// that side's bytes (a half-close: the other direction runs on). The host
// ending the stream ends the guest's connection; the guest ends the stream
// once both directions are over. Only 127.0.0.1 and ::1 are dialled, ports
// 1 to 65535; both sides check.
const (
	FrameData    byte = 'd'
	FrameDataEOF byte = 'D'
)

// DialRequest names the loopback address to connect to inside the box.
type DialRequest struct {
	Host string `json:"host"` // "127.0.0.1" or "::1"
	Port int    `json:"port"`
}

// ErrDialAddr is returned for an address that is not a port on the box's
// loopback.
var ErrDialAddr = errors.New("only a port on the box's loopback (127.0.0.1 or ::1, port 1-65535) can be dialled")

// CheckDial validates a dial request: the host is exactly 127.0.0.1 or ::1,
// the port 1 to 65535.
func CheckDial(d DialRequest) error {
	if d.Port < 1 || d.Port > 65535 {
		return fmt.Errorf("port %d: %w", d.Port, ErrDialAddr)
	}
	if d.Host != "127.0.0.1" && d.Host != "::1" {
		return fmt.Errorf("host %q: %w", d.Host, ErrDialAddr)
	}
	return nil
}

// Addr is the request's address for net.Dial.
func (d DialRequest) Addr() string { return net.JoinHostPort(d.Host, fmt.Sprint(d.Port)) }

// Conn is a TCP connection inside a box, seen from the host. It is a
// net.Conn with CloseWrite (a half-close, as *net.TCPConn has).
type Conn struct {
	st   *yamux.Stream
	addr DialRequest

	rmu  sync.Mutex
	fr   *FrameReader
	rest []byte // unread payload of the last data frame
	rerr error  // sticky: io.EOF after 'D', or the protocol error

	wmu    sync.Mutex
	buf    []byte
	closed bool // CloseWrite sent
}

var _ net.Conn = (*Conn)(nil)

// Dial connects to d inside the box. The connection outlives ctx, which
// bounds the dial only.
func (c *Client) Dial(ctx context.Context, d DialRequest) (*Conn, error) {
	if err := CheckDial(d); err != nil {
		return nil, fmt.Errorf("agent dial: %w", err)
	}
	st, _, stop, err := c.call(ctx, Request{Op: OpDial, Path: d.Addr(), Dial: &d})
	if err != nil {
		return nil, err
	}
	if !stop() {
		st.Close()
		return nil, fmt.Errorf("agent dial %s: %w", d.Addr(), ctx.Err())
	}
	return &Conn{st: st, addr: d, fr: NewFrameReader(st)}, nil
}

// Read reads the box's bytes; io.EOF once the box's side half-closed.
func (k *Conn) Read(b []byte) (int, error) {
	k.rmu.Lock()
	defer k.rmu.Unlock()
	for len(k.rest) == 0 {
		if k.rerr != nil {
			return 0, k.rerr
		}
		kind, p, err := k.fr.Next()
		switch {
		case err != nil:
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, yamux.ErrTimeout) {
				return 0, err // not sticky: a later deadline may allow more
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the stream ended without 'D'
			}
			k.rerr = fmt.Errorf("box connection to %s: %w", k.addr.Addr(), err)
		case kind == FrameData:
			k.rest = p
		case kind == FrameDataEOF && len(p) == 0:
			k.rerr = io.EOF
		default:
			k.rerr = fmt.Errorf("box connection to %s: bad frame %q of %d bytes", k.addr.Addr(), kind, len(p))
			k.st.Close()
		}
	}
	n := copy(b, k.rest)
	k.rest = k.rest[n:]
	return n, nil
}

// Write sends b to the box in frames of at most MaxExecData bytes, each in
// one write.
func (k *Conn) Write(b []byte) (int, error) {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	if k.closed {
		return 0, fmt.Errorf("box connection to %s: write after CloseWrite: %w", k.addr.Addr(), net.ErrClosed)
	}
	written := 0
	for len(b) > 0 {
		n := min(len(b), MaxExecData)
		k.buf = append(k.buf[:0], make([]byte, FrameHead)...)
		k.buf = append(k.buf, b[:n]...)
		if _, err := k.st.Write(PutFrameHead(k.buf, FrameData)); err != nil {
			return written, err
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// CloseWrite ends the bytes to the box (the box's server reads EOF); its
// answer can still be read.
func (k *Conn) CloseWrite() error {
	k.wmu.Lock()
	defer k.wmu.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	var h [FrameHead]byte
	_, err := k.st.Write(PutFrameHead(h[:], FrameDataEOF))
	return err
}

// Close ends the connection both ways.
func (k *Conn) Close() error { return k.st.Close() }

// LocalAddr is the gateway's end: no address of its own.
func (k *Conn) LocalAddr() net.Addr { return boxAddr("gateway") }

// RemoteAddr names the box's loopback address.
func (k *Conn) RemoteAddr() net.Addr { return boxAddr(k.addr.Addr()) }

func (k *Conn) SetDeadline(t time.Time) error      { return k.st.SetDeadline(t) }
func (k *Conn) SetReadDeadline(t time.Time) error  { return k.st.SetReadDeadline(t) }
func (k *Conn) SetWriteDeadline(t time.Time) error { return k.st.SetWriteDeadline(t) }

type boxAddr string

func (a boxAddr) Network() string { return "sbx-box" }
func (a boxAddr) String() string  { return string(a) }
