package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/guest/agentd"
)

// socketPair is a connected pair of stream sockets, the closest local stand-in
// for the host's agent.sock and the guest's port.
func socketPair(t testing.TB) (host, guest *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Non-blocking, so Close interrupts a pending Read as on a real port.
	unix.SetNonblock(fds[0], true)
	unix.SetNonblock(fds[1], true)
	return os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
}

// testGuest runs Serve on a temporary root and hands it connections.
type testGuest struct {
	root  string
	conns chan io.ReadWriteCloser
}

func startGuest(t testing.TB, opts agentd.ServerOptions) *testGuest {
	t.Helper()
	g := &testGuest{root: t.TempDir(), conns: make(chan io.ReadWriteCloser, 4)}
	if opts.Root == "" {
		opts.Root = g.root
	} else {
		g.root = opts.Root
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agentd.Serve(ctx, agentd.PortOpenerFunc(func(ctx context.Context) (io.ReadWriteCloser, error) {
			select {
			case c := <-g.conns:
				return c, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}), opts)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// connect opens a new host connection to the guest.
func (g *testGuest) connect(t testing.TB) *agent.Client {
	t.Helper()
	host, guest := socketPair(t)
	g.conns <- guest
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := agent.Connect(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newClient(t testing.TB) (*agent.Client, string) {
	g := startGuest(t, agentd.ServerOptions{})
	return g.connect(t), g.root
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run executes argv and returns stdout, stderr and the exit status.
func run(t testing.TB, c *agent.Client, req agent.ExecRequest, stdin string) (string, string, agent.ExitStatus) {
	t.Helper()
	p, err := c.Exec(ctxT(t), req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	go func() {
		io.WriteString(p.Stdin(), stdin)
		p.Stdin().Close()
	}()
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&stdout, p.Stdout()) }()
	go func() { defer wg.Done(); io.Copy(&stderr, p.Stderr()) }()
	st, err := p.Wait()
	wg.Wait()
	if err != nil {
		t.Fatalf("wait %q: %v", req.Argv, err)
	}
	return stdout.String(), stderr.String(), st
}

func TestPing(t *testing.T) {
	c, root := newClient(t)
	h, err := c.Ping(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Kernel == "" || h.Uptime <= 0 || h.Root != root || h.Version != agent.ProtocolVersion || h.MemTotal == 0 || h.MemFree == 0 || h.Procs == 0 {
		t.Fatalf("health = %+v", h)
	}
}

func TestExecExitCodes(t *testing.T) {
	c, _ := newClient(t)
	for _, tc := range []struct {
		argv []string
		code int
	}{
		{[]string{"true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 42"}, 42},
	} {
		_, _, st := run(t, c, agent.ExecRequest{Argv: tc.argv}, "")
		if st.Code != tc.code || st.Signal != "" {
			t.Errorf("%q: status %+v, want code %d", tc.argv, st, tc.code)
		}
	}
	_, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"no-such-command-sbx"}})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing command: err = %v, want not-exist", err)
	}
}

func TestExecOutputEnvDir(t *testing.T) {
	c, root := newClient(t)
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, st := run(t, c, agent.ExecRequest{
		Argv: []string{"sh", "-c", `echo "out $FOO $HOME"; echo err >&2; pwd`},
		Env:  []string{"FOO=bar"},
		Dir:  "sub",
	}, "")
	want := "out bar /root\n" + filepath.Join(root, "sub") + "\n"
	if out != want || errOut != "err\n" || st.Code != 0 {
		t.Fatalf("stdout %q stderr %q status %+v; want stdout %q", out, errOut, st, want)
	}
	_, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"true"}, Dir: "../"})
	if !errors.Is(err, agent.ErrEscape) {
		t.Fatalf("exec in ../: err = %v, want agent.ErrEscape", err)
	}
}

func TestExecStdinEOF(t *testing.T) {
	c, _ := newClient(t)
	out, _, st := run(t, c, agent.ExecRequest{Argv: []string{"cat"}}, "hello through stdin")
	if out != "hello through stdin" || st.Code != 0 {
		t.Fatalf("cat: %q %+v", out, st)
	}
}

func TestExecSignal(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.PID() <= 0 {
		t.Fatalf("pid %d", p.PID())
	}
	if err := p.Signal(ctx, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != "SIGINT" || st.Code != -1 {
		t.Fatalf("status %+v, want SIGINT", st)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err == nil {
		t.Fatal("signal after exit: no error")
	}
}

func TestExecPTYSizeAndResize(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	p, err := c.Exec(ctx, agent.ExecRequest{
		Argv: []string{"sh", "-c", "stty size; read x; stty size; [ -t 0 ] && echo tty; echo $TERM"},
		TTY:  true, Rows: 30, Cols: 100,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	copied := make(chan struct{})
	go func() { io.Copy(out, p.Stdout()); close(copied) }()
	waitFor(t, func() bool { return strings.Contains(out.String(), "30 100") })
	if err := p.Resize(ctx, 40, 120); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "go\n")
	st, err := p.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("wait: %+v %v", st, err)
	}
	<-copied
	got := out.String()
	for _, want := range []string{"30 100", "40 120", "tty", "xterm-256color"} {
		if !strings.Contains(got, want) {
			t.Errorf("pty output %q lacks %q", got, want)
		}
	}
	if n, _ := p.Stderr().Read(make([]byte, 1)); n != 0 {
		t.Error("stderr of a tty process is not empty")
	}
}

func TestExecPTYStdinEOF(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"cat"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.Stdin(), "typed\n")
	p.Stdin().Close() // ^D ends cat
	out, _ := io.ReadAll(p.Stdout())
	st, err := p.Wait()
	if err != nil || st.Code != 0 || !strings.Contains(string(out), "typed") {
		t.Fatalf("tty cat: %q %+v %v", out, st, err)
	}
}

// A background child that keeps stdout open must not keep Wait from returning.
func TestExecBackgroundChildDoesNotHangWait(t *testing.T) {
	c, _ := newClient(t)
	out, _, st := run(t, c, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 30 & echo started"}}, "")
	if out != "started\n" || st.Code != 0 {
		t.Fatalf("%q %+v", out, st)
	}
}

// Output is never dropped when the host reads slowly (back-pressure).
func TestExecLargeOutputBackPressure(t *testing.T) {
	c, _ := newClient(t)
	p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"head", "-c", "8000000", "/dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	time.Sleep(500 * time.Millisecond) // the process exits while most output is still queued
	n, err := io.Copy(io.Discard, p.Stdout())
	if err != nil || n != 8000000 {
		t.Fatalf("read %d bytes, err %v; want 8000000", n, err)
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestFileRoundTrip50MB(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	data := make([]byte, 50<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	if err := c.MkdirAll(ctx, "a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "/workspace/a/b/big.bin", 0o600, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	fi, err := c.Stat(ctx, "a/b/big.bin")
	if err != nil || fi.Size != int64(len(data)) || fi.Mode.Perm() != 0o600 || fi.Name != "big.bin" {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	r, err := c.ReadFile(ctx, "a/b/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("read back checksum differs")
	}
	// And through tar, out and back in elsewhere.
	tr, err := c.TarOut(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MkdirAll(ctx, "copy", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.TarIn(ctx, "copy", tr); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	got, err := os.ReadFile(filepath.Join(root, "copy/b/big.bin"))
	if err != nil || sha256.Sum256(got) != want {
		t.Fatalf("tar round trip: %v", err)
	}
}

func TestFileOps(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	if err := c.WriteFile(ctx, "f.txt", 0, strings.NewReader("one")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "f.txt", 0, strings.NewReader("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f.txt")); string(b) != "two" {
		t.Fatalf("overwrite: %q", b)
	}
	os.Symlink("f.txt", filepath.Join(root, "link"))
	infos, err := c.ReadDir(ctx, ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != "f.txt" || infos[1].Name != "link" || infos[1].Link != "f.txt" || infos[1].Mode&fs.ModeSymlink == 0 {
		t.Fatalf("readdir: %+v", infos)
	}
	if _, err := c.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := c.ReadFile(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read missing: %v", err)
	}
	if err := c.WriteFile(ctx, "nodir/x", 0, strings.NewReader("")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write into missing dir: %v", err)
	}
	if err := c.MkdirAll(ctx, "d/e/f", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, "d/e/f/g", 0, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "d")); !os.IsNotExist(err) {
		t.Fatalf("remove d: %v", err)
	}
	if err := c.Remove(ctx, "."); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("remove root: %v", err)
	}
	if err := c.Remove(ctx, "link"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "f.txt")); err != nil {
		t.Fatalf("removing a link removed its target: %v", err)
	}
}

// A failing upload leaves the old file alone and no temporary file behind.
func TestWriteFileFailedUploadKeepsOld(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	if err := c.WriteFile(ctx, "keep.txt", 0, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	bad := io.MultiReader(strings.NewReader("partial"), errReader{})
	if err := c.WriteFile(ctx, "keep.txt", 0, bad); err == nil {
		t.Fatal("upload with a failing reader succeeded")
	}
	waitFor(t, func() bool {
		ents, _ := os.ReadDir(root)
		return len(ents) == 1
	})
	if b, _ := os.ReadFile(filepath.Join(root, "keep.txt")); string(b) != "old" {
		t.Fatalf("content %q after failed upload", b)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestWatch(t *testing.T) {
	g := startGuest(t, agentd.ServerOptions{WatchInterval: 10 * time.Millisecond})
	c := g.connect(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := c.Watch(ctx, "question.txt")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(g.root, "question.txt")
	next := func(want agent.WatchKind) {
		t.Helper()
		select {
		case ev := <-ch:
			if ev.Kind != want {
				t.Fatalf("event %+v, want %s", ev, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", want)
		}
	}
	os.WriteFile(p, []byte("q?"), 0o644)
	next(agent.Created)
	os.WriteFile(p, []byte("longer q?"), 0o644)
	next(agent.Changed)
	os.Remove(p)
	next(agent.Removed)
	cancel()
	for range ch {
	}
}

// Every way out of /workspace fails with ErrEscape and touches nothing.
func TestEscapesRefused(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	must(t, os.Symlink("/etc", filepath.Join(root, "etc")))
	must(t, os.Symlink(outside, filepath.Join(root, "out")))
	must(t, os.Symlink("../..", filepath.Join(root, "up")))
	must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	must(t, os.Symlink("../up", filepath.Join(root, "d", "chain"))) // d/chain -> up -> ../..
	must(t, os.Symlink("/proc/self/root", filepath.Join(root, "magic")))

	paths := []string{
		"../x", "a/../../x", "/etc/passwd", "/workspace/../etc/passwd", "/workspacefoo/x",
		"etc/passwd", "out/secret", "up/etc/passwd", "d/chain/etc/passwd", "magic/etc/passwd",
	}
	for _, p := range paths {
		check := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, agent.ErrEscape) {
				t.Errorf("%s %q: err = %v, want agent.ErrEscape", op, p, err)
			}
		}
		_, err := c.Stat(ctx, p)
		check("stat", err)
		_, err = c.ReadFile(ctx, p)
		check("read", err)
		_, err = c.ReadDir(ctx, p)
		check("readdir", err)
		check("write", c.WriteFile(ctx, p+"-new", 0, strings.NewReader("x")))
		check("mkdir", c.MkdirAll(ctx, p+"-dir/y", 0))
		_, err = c.TarOut(ctx, p)
		check("tarout", err)
		_, err = c.Watch(ctx, p)
		check("watch", err)
		_, err = c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}, Dir: p})
		check("exec dir", err)
	}
	for _, p := range []string{"out/secret", "../x", "up/x"} {
		if err := c.Remove(ctx, p); !errors.Is(err, agent.ErrEscape) {
			t.Errorf("remove %q: %v, want agent.ErrEscape", p, err)
		}
	}
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("outside file touched: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("something was created outside: %v", ents)
	}
	// A symlink to the outside is still listed and removable as a link.
	if err := c.Remove(ctx, "out"); err != nil {
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
