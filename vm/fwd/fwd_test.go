package fwd

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// helperEnv makes the test binary run Main, the way QEMU runs `sbx vm-fwd`.
const helperEnv = "SBX_FWD_TEST_MAIN"

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperEnv); sock != "" {
		if err := Main(context.Background(), sock); err != nil {
			// Main pointed fd 2 at /dev/null: this must not reach the guest.
			os.Stderr.WriteString("LEAK " + err.Error() + "\n")
			panic("LEAK panic: " + err.Error())
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tcpPair is a connected TCP pair on loopback, like the socket pair QEMU's
// slirp hands its guestfwd program.
func tcpPair(t *testing.T) (guestSide, fwdSide *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// gateway listens on a unix socket and runs serve for each connection.
func gateway(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return sock
}

// joinDone runs Join and returns its result channel.
func joinDone(ctx context.Context, c net.Conn, sock string) chan error {
	done := make(chan error, 1)
	go func() { done <- Join(ctx, c, sock) }()
	return done
}

func wait(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Join did not return")
		return nil
	}
}

func TestJoin(t *testing.T) {
	ctx := context.Background()

	t.Run("HalfCloseRequestThenReply", func(t *testing.T) {
		sock := gateway(t, func(c net.Conn) {
			req, _ := io.ReadAll(c) // until the guest's half-close
			c.Write([]byte("reply to " + string(req)))
		})
		g, f := tcpPair(t)
		done := joinDone(ctx, f, sock)
		g.Write([]byte("GET /hello"))
		g.CloseWrite()
		got, err := io.ReadAll(g)
		if err != nil || string(got) != "reply to GET /hello" {
			t.Fatalf("guest read %q, %v", got, err)
		}
		if err := wait(t, done); err != nil {
			t.Fatalf("Join: %v", err)
		}
	})

	t.Run("BigBothWays", func(t *testing.T) {
		sock := gateway(t, func(c net.Conn) { io.Copy(c, c) })
		g, f := tcpPair(t)
		done := joinDone(ctx, f, sock)
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		go func() { g.Write(data); g.CloseWrite() }()
		got, err := io.ReadAll(g)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("echo: %d bytes, %v", len(got), err)
		}
		if err := wait(t, done); err != nil {
			t.Fatalf("Join: %v", err)
		}
	})

	t.Run("NoGateway", func(t *testing.T) {
		g, f := tcpPair(t)
		done := joinDone(ctx, f, filepath.Join(t.TempDir(), "missing.sock"))
		if err := wait(t, done); err == nil {
			t.Fatal("Join to a missing socket succeeded")
		}
		if n, err := g.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("guest read %d, %v; want the connection closed", n, err)
		}
	})

	// QEMU killed: the guest side vanishes while the gateway keeps
	// streaming. The forwarder must not outlive it.
	t.Run("GuestGoneWhileGatewayStreams", func(t *testing.T) {
		sock := gateway(t, func(c net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		})
		g, f := tcpPair(t)
		done := joinDone(ctx, f, sock)
		g.Read(make([]byte, 1024))
		g.Close()
		if err := wait(t, done); err == nil {
			t.Fatal("Join returned nil after the guest side broke mid-stream")
		}
	})

	t.Run("GatewayClosesIdleGuest", func(t *testing.T) {
		sock := gateway(t, func(c net.Conn) { c.Write([]byte("bye")) })
		g, f := tcpPair(t)
		done := joinDone(ctx, f, sock)
		got, _ := io.ReadAll(g) // the gateway's close reaches the guest as EOF
		if string(got) != "bye" {
			t.Fatalf("guest read %q", got)
		}
		g.Close()
		if err := wait(t, done); err != nil {
			t.Fatalf("Join: %v", err)
		}
	})

	t.Run("ContextEnds", func(t *testing.T) {
		sock := gateway(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		_, f := tcpPair(t)
		cctx, cancel := context.WithCancel(ctx)
		done := joinDone(cctx, f, sock)
		cancel()
		if err := wait(t, done); err == nil {
			t.Fatal("Join returned nil after its context ended")
		}
	})
}

// runMain starts the test binary as `vm-fwd SOCK` with one end of a TCP
// pair on fds 0-2, as QEMU does, and returns the other end.
func runMain(t *testing.T, sock string) (*net.TCPConn, *exec.Cmd) {
	t.Helper()
	g, f := tcpPair(t)
	ff, err := f.File()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ff, ff, ff
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ff.Close()
	return g, cmd
}

func TestMainServesFDs(t *testing.T) {
	sock := gateway(t, func(c net.Conn) {
		req, _ := io.ReadAll(c)
		c.Write(bytes.ToUpper(req))
	})
	g, cmd := runMain(t, sock)
	g.Write([]byte("hello"))
	g.CloseWrite()
	got, _ := io.ReadAll(g)
	if string(got) != "HELLO" {
		t.Fatalf("guest read %q", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("vm-fwd exit: %v", err)
	}
}

// Regression: fd 2 of the forwarder is the guest's connection. An error
// (here: no gateway socket, whose path names a host directory) or a panic
// must not be written to the box.
func TestMainStderrNeverReachesGuest(t *testing.T) {
	g, cmd := runMain(t, filepath.Join(t.TempDir(), "no-such-gateway.sock"))
	got, _ := io.ReadAll(g)
	if len(got) != 0 {
		t.Fatalf("the guest received %q", got)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("vm-fwd exited 0 without a gateway")
	}
}
