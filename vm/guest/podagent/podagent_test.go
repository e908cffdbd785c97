package podagent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm/agent"
)

func TestReadStats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Stats
		err   string
	}{
		{"v2", map[string]string{"cpu.stat": "usage_usec 1234\nuser_usec 1000\n", "memory.stat": "anon 4096\nfile 99999\n"}, Stats{CPUNanos: 1234000, PrivateBytes: 4096}, ""},
		{"v1 hierarchy", map[string]string{"cpuacct/cpuacct.usage": "5555\n", "memory/memory.stat": "rss 1\ntotal_rss 8192\ncache 7\n"}, Stats{CPUNanos: 5555, PrivateBytes: 8192}, ""},
		{"v1 flat rss", map[string]string{"cpuacct/cpuacct.usage": "1\n", "memory/memory.stat": "rss 2048\n"}, Stats{CPUNanos: 1, PrivateBytes: 2048}, ""},
		{"v2 without usage", map[string]string{"cpu.stat": "user_usec 1\n", "memory.stat": "anon 1\n"}, Stats{}, "no usage_usec"},
		{"v1 garbage", map[string]string{"cpuacct/cpuacct.usage": "lots\n", "memory/memory.stat": ""}, Stats{}, "cpuacct.usage"},
		{"nothing", map[string]string{}, Stats{}, "no cgroup v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, c := range tc.files {
				os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
				if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ReadStats(dir)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// serve runs the pod agent on a socket in a temp dir for the test.
func serve(t *testing.T) (sock, workspace string) {
	dir := t.TempDir()
	sock, workspace = filepath.Join(dir, "run", "agent.sock"), filepath.Join(dir, "ws")
	os.Mkdir(workspace, 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(&testutil.SyncBuffer{}, nil))
	go func() { done <- Serve(ctx, sock, workspace, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not end with its context")
		}
	})
	return sock, workspace
}

// pipeConn joins a reader and a writer into the connection agent.Connect takes.
type pipeConn struct {
	io.Reader
	io.WriteCloser
}

// TestBridgeCarriesTheAgent: the gateway's side of an exec stream (here two
// pipes) reaches the agent through Bridge, and the socket is owner-only.
func TestBridgeCarriesTheAgent(t *testing.T) {
	sock, ws := serve(t)
	ctx := context.Background()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	bridged := make(chan error, 1)
	go func() { bridged <- Bridge(ctx, sock, inR, outW); outW.Close() }()
	c, err := agent.Connect(ctx, pipeConn{outR, inW})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Ping(ctx)
	if err != nil || h.Root != ws {
		t.Fatalf("ping through the bridge: %+v %v", h, err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v, want 0600", fi.Mode(), err)
	}
	c.Close() // the gateway hangs up: the bridge ends, the agent stays
	select {
	case <-bridged:
	case <-time.After(10 * time.Second):
		t.Fatal("bridge outlived the gateway's stream")
	}
	c2, err := dial(t, sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Ping(ctx); err != nil {
		t.Fatalf("agent after a bridge ended: %v", err)
	}
}

func dial(t *testing.T, sock string) (*agent.Client, error) {
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if conn, err = net.Dial("unix", sock); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Connect(ctx, conn)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// TestNewestConnectionWins: a gateway whose predecessor's stream still
// lingers is served at once, and the old one is cut.
func TestNewestConnectionWins(t *testing.T) {
	sock, _ := serve(t)
	ctx := context.Background()
	old, err := dial(t, sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cur, err := dial(t, sock)
	if err != nil {
		t.Fatalf("second connection while the first is open: %v", err)
	}
	if _, err := cur.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the older connection was not cut")
	}
}

// dialAs connects as a named client (the first line a gateway sends).
func dialAs(t *testing.T, sock, id string) *agent.Client {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, ClientHeader+id+"\n"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Connect(ctx, conn)
	if err != nil {
		t.Fatalf("connect as %q: %v", id, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientsKeepTheirSessions: two gateways on one box each keep their
// connection (neither cuts the other); a gateway's newer connection still
// replaces its own older one.
func TestClientsKeepTheirSessions(t *testing.T) {
	sock, _ := serve(t)
	ctx := context.Background()
	if _, err := dial(t, sock); err != nil { // the client "" (no line)
		t.Fatal(err)
	}
	a := dialAs(t, sock, "gateway-a")
	b := dialAs(t, sock, "gateway-b")
	for i := 0; i < 3; i++ {
		for name, c := range map[string]*agent.Client{"a": a, "b": b} {
			if _, err := c.Ping(ctx); err != nil {
				t.Fatalf("ping %s (round %d): %v", name, i, err)
			}
		}
	}
	// A process started through one gateway is not cut by the other's
	// connections.
	p, err := a.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "read x; echo got $x"}})
	if err != nil {
		t.Fatal(err)
	}
	b2 := dialAs(t, sock, "gateway-b")
	if _, err := b2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("gateway b's older connection was not replaced by its newer one")
	}
	io.WriteString(p.Stdin(), "hello\n")
	out, _ := io.ReadAll(p.Stdout())
	if st, err := p.Wait(); err != nil || st.Code != 0 || strings.TrimSpace(string(out)) != "got hello" {
		t.Fatalf("process through a: %q %+v %v", out, st, err)
	}
	select {
	case <-a.Done():
		t.Fatal("gateway a's connection was cut by gateway b's")
	default:
	}
}

func TestReadClientLine(t *testing.T) {
	for _, tc := range []struct {
		name, in, id, rest, err string
	}{
		{"no line", "SBXHELLO123", "", "SBXHELLO123", ""},
		{"named", ClientHeader + "gw-1\nSBXHELLO", "gw-1", "SBXHELLO", ""},
		{"empty name", ClientHeader + "\nX", "", "X", ""},
		{"not a client line", "#nope\n", "", "", "not a client line"},
		{"too long", ClientHeader + strings.Repeat("x", MaxClientID+10) + "\n", "", "", "too long"},
		{"cut short", ClientHeader + "gw", "", "", "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2 := net.Pipe()
			go func() { io.WriteString(c2, tc.in); c2.Close() }()
			id, conn, err := readClient(c1)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || id != tc.id {
				t.Fatalf("id %q err %v, want %q", id, err, tc.id)
			}
			rest, _ := io.ReadAll(conn)
			if string(rest) != tc.rest {
				t.Fatalf("rest %q, want %q", rest, tc.rest)
			}
		})
	}
}

func TestBridgeWaitsForTheSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := Bridge(ctx, sock, strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "pod agent bridge") {
		t.Fatalf("bridge to no socket: %v", err)
	}
}
