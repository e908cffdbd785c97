package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strconv"
	"testing"
	"time"

	"sbx.dev/sbx/vm/agent"
)

// listen serves one connection on 127.0.0.1 with handle; the port is
// returned.
func listen(t *testing.T, handle func(c *net.TCPConn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c.(*net.TCPConn))
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// The host half-closes after a large upload; the box's server reads to EOF
// and only then answers, so the answer proves the half-close arrived and
// that the way back still runs.
func TestDialHalfCloseFromHost(t *testing.T) {
	c, _ := newClient(t)
	port := listen(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "got %d bytes", n)
	})
	k, err := c.Dial(ctxT(t), agent.DialRequest{Host: "127.0.0.1", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB: many frames
	if n, err := k.Write(payload); err != nil || n != len(payload) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := k.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after CloseWrite: %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(k)
	if err != nil {
		t.Fatal(err)
	}
	if want := "got " + strconv.Itoa(len(payload)) + " bytes"; string(got) != want {
		t.Fatalf("answer %q, want %q", got, want)
	}
}

// The box's server half-closes first; the host still sends, and the box
// still reads.
func TestDialHalfCloseFromBox(t *testing.T) {
	c, _ := newClient(t)
	got := make(chan string, 1)
	port := listen(t, func(c *net.TCPConn) {
		c.Write([]byte("hello"))
		c.CloseWrite()
		b, _ := io.ReadAll(c)
		got <- string(b)
	})
	k, err := c.Dial(ctxT(t), agent.DialRequest{Host: "127.0.0.1", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	b, err := io.ReadAll(k)
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := k.Write([]byte("after your EOF")); err != nil {
		t.Fatal(err)
	}
	k.CloseWrite()
	select {
	case s := <-got:
		if s != "after your EOF" {
			t.Fatalf("box read %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("box never read the host's bytes")
	}
}

// Close ends the box's connection: its server reads EOF, and the stream is
// gone from the session.
func TestDialCloseEndsBoxConn(t *testing.T) {
	c, _ := newClient(t)
	ended := make(chan error, 1)
	port := listen(t, func(c *net.TCPConn) {
		_, err := io.Copy(io.Discard, c)
		ended <- err
	})
	k, err := c.Dial(ctxT(t), agent.DialRequest{Host: "127.0.0.1", Port: port})
	if err != nil {
		t.Fatal(err)
	}
	k.Write([]byte("x"))
	k.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the box's connection outlived Close")
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.OpenStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams still open after Close", c.OpenStreams())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDialNothingListening(t *testing.T) {
	c, _ := newClient(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = c.Dial(ctxT(t), agent.DialRequest{Host: "127.0.0.1", Port: port})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dial to a closed port: %v, want fs.ErrNotExist", err)
	}
}

// Security: only the box's loopback. The client refuses before sending, and
// the guest refuses a request that skipped the client's check.
func TestDialOnlyLoopback(t *testing.T) {
	c, _ := newClient(t)
	for _, d := range []agent.DialRequest{
		{Host: "10.0.2.100", Port: 80}, {Host: "0.0.0.0", Port: 22}, {Host: "localhost", Port: 22},
		{Host: "127.0.0.2", Port: 22}, {Host: "::ffff:127.0.0.1", Port: 22}, {Host: "", Port: 22},
		{Host: "127.0.0.1", Port: 0}, {Host: "127.0.0.1", Port: 65536}, {Host: "127.0.0.1", Port: -1},
		{Host: "169.254.169.254", Port: 80}, {Host: "127.0.0.1 ", Port: 22}, {Host: "[::1]", Port: 22},
	} {
		if _, err := c.Dial(ctxT(t), d); !errors.Is(err, agent.ErrDialAddr) {
			t.Errorf("client dial %+v: %v, want ErrDialAddr", d, err)
		}
		rep, err := c.Simple(ctxT(t), agent.Request{Op: agent.OpDial, Dial: &d})
		if !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("guest dial %+v: %+v, %v; want an invalid-request error", d, rep, err)
		}
	}
	if _, err := c.Simple(ctxT(t), agent.Request{Op: agent.OpDial}); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("guest dial without an address: %v", err)
	}
}

func TestDialIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback here: %v", err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("six"))
			c.Close()
		}
	}()
	c, _ := newClient(t)
	k, err := c.Dial(ctxT(t), agent.DialRequest{Host: "::1", Port: ln.Addr().(*net.TCPAddr).Port})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if b, err := io.ReadAll(k); err != nil || string(b) != "six" {
		t.Fatalf("read %q, %v", b, err)
	}
}

func FuzzCheckDial(f *testing.F) {
	f.Add("127.0.0.1", 80)
	f.Add("::1", 65535)
	f.Add("10.0.0.1", 1)
	f.Fuzz(func(t *testing.T, host string, port int) {
		err := agent.CheckDial(agent.DialRequest{Host: host, Port: port})
		ok := (host == "127.0.0.1" || host == "::1") && port >= 1 && port <= 65535
		if (err == nil) != ok {
			t.Fatalf("CheckDial(%q, %d) = %v", host, port, err)
		}
		if err == nil {
			ip := net.ParseIP(host)
			if ip == nil || !ip.IsLoopback() {
				t.Fatalf("accepted %q", host)
			}
		}
	})
}
