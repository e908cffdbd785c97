package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"
)

// helloMagic starts the hello both sides exchange; yamux frames start with a
// zero version byte, so a hello can never be mistaken for one.
const helloMagic = "SBXHELLO"

const (
	nonceLen = 16
	helloLen = len(helloMagic) + nonceLen
)

// helloResend is how often the host repeats its hello while the guest is silent
// (the guest may still be booting, or busy ending an earlier session).
const helloResend = 50 * time.Millisecond

// bufConn reads through a bufio.Reader that may already hold bytes after the
// hello, and writes and closes the underlying connection.
type bufConn struct {
	r *bufio.Reader
	c io.ReadWriteCloser
}

func (b *bufConn) Read(p []byte) (int, error)  { return b.r.Read(p) }
func (b *bufConn) Write(p []byte) (int, error) { return b.c.Write(p) }
func (b *bufConn) Close() error                { return b.c.Close() }

// hostHandshake sends a fresh nonce and waits for the guest to echo it,
// discarding everything before the echo (stale replies of an earlier connection).
func hostHandshake(ctx context.Context, conn io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	hello := make([]byte, helloLen)
	copy(hello, helloMagic)
	if _, err := rand.Read(hello[len(helloMagic):]); err != nil {
		return nil, fmt.Errorf("handshake nonce: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	found := make(chan error, 1)
	go func() { found <- scanFor(br, hello) }()
	// A guest that stops reading makes Write block on a full socket buffer:
	// closing the connection when ctx ends unblocks it as well as the scanner.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(what string, err error) (io.ReadWriteCloser, error) {
		stop()
		conn.Close()
		<-found
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("handshake: %s: %w", what, err)
	}

	if _, err := conn.Write(hello); err != nil {
		return fail("send hello", err)
	}
	tick := time.NewTicker(helloResend)
	defer tick.Stop()
	for {
		select {
		case err := <-found:
			if err != nil {
				found <- err // fail waits for the scanner's result
				return fail("wait for the guest's echo", err)
			}
			if !stop() {
				return nil, fmt.Errorf("handshake: %w", ctx.Err()) // ctx ended as the echo came
			}
			return &bufConn{r: br, c: conn}, nil
		case <-tick.C:
			if _, err := conn.Write(hello); err != nil {
				return fail("resend hello", err)
			}
		case <-ctx.Done():
			return fail("wait for the guest's echo", ctx.Err())
		}
	}
}

// scanFor reads until want has been seen, dropping every byte before it.
func scanFor(br *bufio.Reader, want []byte) error {
	matched := 0
	for matched < len(want) {
		c, err := br.ReadByte()
		if err != nil {
			return err
		}
		switch {
		case c == want[matched]:
			matched++
		case c == want[0]:
			matched = 1
		default:
			matched = 0
		}
	}
	return nil
}

// GuestHandshake waits for a hello, echoes it and returns the connection to
// run yamux on. Repeated hellos at the start of the stream (the host resends
// while waiting) are skipped and a newer nonce is echoed again.
func GuestHandshake(conn io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := scanFor(br, []byte(helloMagic)); err != nil {
		return nil, err
	}
	hello := make([]byte, helloLen)
	copy(hello, helloMagic)
	if _, err := io.ReadFull(br, hello[len(helloMagic):]); err != nil {
		return nil, err
	}
	if _, err := conn.Write(hello); err != nil {
		return nil, fmt.Errorf("echo hello: %w", err)
	}
	return &guestConn{r: br, c: conn, last: hello}, nil
}

// guestConn skips repeated hellos until the first yamux byte arrives.
type guestConn struct {
	r       *bufio.Reader
	c       io.ReadWriteCloser
	last    []byte
	started bool
}

func (g *guestConn) Read(p []byte) (int, error) {
	for !g.started {
		b, err := g.r.Peek(1)
		if err != nil {
			return 0, err
		}
		if b[0] != helloMagic[0] {
			g.started = true
			break
		}
		hello := make([]byte, helloLen)
		if _, err := io.ReadFull(g.r, hello); err != nil {
			return 0, err
		}
		if !bytes.HasPrefix(hello, []byte(helloMagic)) {
			return 0, fmt.Errorf("handshake: garbage %q before the first frame", hello)
		}
		if !bytes.Equal(hello, g.last) {
			// A newer host connection: nothing was exchanged yet, answer it.
			if _, err := g.c.Write(hello); err != nil {
				return 0, err
			}
			g.last = hello
		}
	}
	return g.r.Read(p)
}

func (g *guestConn) Write(p []byte) (int, error) { return g.c.Write(p) }
func (g *guestConn) Close() error                { return g.c.Close() }
