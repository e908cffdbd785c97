package podagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
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

// TestDropBoundingCapAllThreadsRegression: the capability is gone from the
// bounding set of every thread, not only the one that dropped it (children
// forked from another thread kept CAP_NET_ADMIN in a box Pod). Run in a
// child process: the drop is for good.
func TestDropBoundingCapAllThreadsRegression(t *testing.T) {
	if os.Getenv("SBX_TEST_DROP_CAP") == "1" {
		// Many threads first, each locked, so the drop must reach them all.
		var wg sync.WaitGroup
		ready := make(chan struct{})
		release := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				runtime.LockOSThread()
				ready <- struct{}{}
				<-release
				// Report this thread's bounding set.
				b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid()))
				if err != nil {
					panic(err)
				}
				fmt.Println(capLine(string(b)))
			})
		}
		for range 8 {
			<-ready
		}
		if err := dropBoundingCap(unix.CAP_NET_ADMIN); err != nil {
			fmt.Println("drop:", err)
			os.Exit(1)
		}
		close(release)
		wg.Wait()
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SETPCAP) to drop from the bounding set")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDropBoundingCapAllThreadsRegression$")
	cmd.Env = append(os.Environ(), "SBX_TEST_DROP_CAP=1")
	out, err := cmd.CombinedOutput()
	if cgoOn {
		// A cgo binary cannot reach every thread: the drop fails closed,
		// saying how to build sbx (the box Pod then does not start).
		if err == nil || !strings.Contains(string(out), "CGO_ENABLED=0") {
			t.Fatalf("with cgo: %v %q, want the drop refused naming CGO_ENABLED=0", err, out)
		}
		return
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	lines := strings.Fields(string(out))
	if len(lines) < 8 {
		t.Fatalf("child printed %q", out)
	}
	for _, l := range lines[:8] {
		v, err := strconv.ParseUint(l, 16, 64)
		if err != nil {
			t.Fatalf("child printed %q", out)
		}
		if v&(1<<unix.CAP_NET_ADMIN) != 0 {
			t.Errorf("a thread kept CAP_NET_ADMIN in its bounding set: %s", l)
		}
	}
}

// capLine returns the CapBnd mask of a /proc status file.
func capLine(status string) string {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// FuzzReadClient: whatever a connection to the agent's or the egress
// socket starts with, the client line parser neither panics nor reads past
// a bounded line, names a client only from a whole ClientHeader line, and
// hands on every byte after it (all bytes when there is no line).
func FuzzReadClient(f *testing.F) {
	for _, s := range []string{ClientHeader + "gw-1\nSBXHELLO", "SBXHELLO", "#", "#sbx-client \n", "#sbx-client " + strings.Repeat("x", 200) + "\n", "#other\nrest", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := net.Pipe()
		go func() { b.Write(in); b.Close() }()
		id, c, err := readClient(a)
		if err != nil {
			return
		}
		rest, _ := io.ReadAll(c)
		if len(in) == 0 || in[0] != ClientHeader[0] {
			if id != "" || string(rest) != string(in) {
				t.Fatalf("no line: id %q, rest %q of %q", id, rest, in)
			}
			return
		}
		line := ClientHeader + id + "\n"
		if len(id) > MaxClientID || strings.Contains(id, "\n") || !strings.HasPrefix(string(in), line) || string(rest) != string(in[len(line):]) {
			t.Fatalf("id %q, rest %q of %q", id, rest, in)
		}
	})
}

// TestReadClientIDLimitRegression: a client id of MaxClientID bytes is
// taken, one byte more refused (the bound let MaxClientID+1 through).
func TestReadClientIDLimitRegression(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{MaxClientID, true}, {MaxClientID + 1, false}, {0, true}} {
		a, b := net.Pipe()
		id := strings.Repeat("g", tc.n)
		go func() { io.WriteString(b, ClientHeader+id+"\nrest"); b.Close() }()
		got, _, err := readClient(a)
		if (err == nil) != tc.ok || tc.ok && got != id {
			t.Errorf("id of %d bytes: %q %v, want ok=%v", tc.n, got, err, tc.ok)
		}
		a.Close()
	}
}
