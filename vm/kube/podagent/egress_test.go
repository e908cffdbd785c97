package podagent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// egressGateway attaches to the pod agent's egress socket as client id and
// answers each stream with id + ":" + what the box sent, after the box
// half-closed (so a half-close must travel both ways).
func egressGateway(t *testing.T, sock, id string) *yamux.Session {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, ClientHeader+id+"\n"); err != nil {
		t.Fatal(err)
	}
	s, err := yamux.Client(c, EgressYamux())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			st, err := s.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				b, _ := io.ReadAll(st)
				io.WriteString(st, id+":"+string(b))
			}()
		}
	}()
	t.Cleanup(func() { s.Close() })
	return s
}

// boxSays opens a box connection to addr, sends msg, half-closes and
// returns the whole answer.
func boxSays(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, msg)
	c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	if errors.Is(err, syscall.ECONNRESET) {
		return "" // closed before reading what the box sent: no gateway
	}
	if err != nil {
		t.Fatalf("box read: %v", err)
	}
	return string(b)
}

func TestEgressHub(t *testing.T) {
	addr, sock := freeAddr(t), filepath.Join(t.TempDir(), "egress.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeEgress(ctx, addr, sock, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("ServeEgress after cancel: %v", err)
		}
	}()
	waitFor(t, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	if got := boxSays(t, addr, "nobody there"); got != "" {
		t.Fatalf("with no gateway attached the box got %q, want its connection closed", got)
	}
	a := egressGateway(t, sock, "gw-a")
	waitFor(t, func() bool { return boxSays(t, addr, "x") == "gw-a:x" })
	if got := boxSays(t, addr, "hello"); got != "gw-a:hello" {
		t.Fatalf("through gateway a: %q", got)
	}
	b := egressGateway(t, sock, "gw-b")
	waitFor(t, func() bool { return boxSays(t, addr, "x") == "gw-b:x" })
	// The newest gateway goes; the one before it takes over.
	b.Close()
	waitFor(t, func() bool { return boxSays(t, addr, "x") == "gw-a:x" })
	// A gateway that reconnects replaces its own older session.
	a2 := egressGateway(t, sock, "gw-a")
	waitFor(t, func() bool { return a.IsClosed() })
	if got := boxSays(t, addr, "again"); got != "gw-a:again" {
		t.Fatalf("through gateway a's new session: %q", got)
	}
	a2.Close()
	waitFor(t, func() bool { return boxSays(t, addr, "x") == "" })
}

// TestEgressBadClientLine: a connection to the gateways' socket that does
// not name itself is dropped and takes no box connection.
func TestEgressBadClientLine(t *testing.T) {
	addr, sock := freeAddr(t), filepath.Join(t.TempDir(), "egress.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ServeEgress(ctx, addr, sock, slog.New(slog.DiscardHandler))
	waitFor(t, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "#not-a-client-line\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a bad first line: the connection stayed open")
	}
	if got := boxSays(t, addr, "x"); got != "" {
		t.Fatalf("the box reached %q through a connection that never named itself", got)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in 10 s")
}
