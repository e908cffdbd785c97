package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
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

type tarEnt struct {
	name, link string
	typ        byte
	body       string
}

func mkTar(t testing.TB, ents ...tarEnt) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		must(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	must(t, tw.Close())
	return &buf
}

// Tar entries may not land outside /workspace, by name or through links.
func TestTarInEscapesRefused(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(root, "planted")))
	for name, ents := range map[string][]tarEnt{
		"dotdot":             {{name: "../evil", typ: tar.TypeReg, body: "x"}},
		"dotdot inside":      {{name: "a/../../evil", typ: tar.TypeReg, body: "x"}},
		"absolute":           {{name: outside + "/evil", typ: tar.TypeReg, body: "x"}},
		"symlink then write": {{name: "l", link: outside, typ: tar.TypeSymlink}, {name: "l/evil", typ: tar.TypeReg, body: "x"}},
		"relative symlink":   {{name: "r", link: "../../../../../../" + outside, typ: tar.TypeSymlink}, {name: "r/evil", typ: tar.TypeReg, body: "x"}},
		"symlink chain":      {{name: "c1", link: "c2", typ: tar.TypeSymlink}, {name: "c2", link: "..", typ: tar.TypeSymlink}, {name: "c1/evil", typ: tar.TypeReg, body: "x"}},
		"symlink dir entry":  {{name: "d", link: outside, typ: tar.TypeSymlink}, {name: "d/sub/", typ: tar.TypeDir}},
		"planted symlink":    {{name: "planted/evil", typ: tar.TypeReg, body: "x"}},
		"hard link out":      {{name: "h", link: "../" + filepath.Base(outside) + "/secret", typ: tar.TypeLink}},
		"hard link via link": {{name: "h2", link: "planted/secret", typ: tar.TypeLink}},
	} {
		err := c.TarIn(ctx, ".", mkTar(t, ents...))
		if !errors.Is(err, agent.ErrEscape) {
			t.Errorf("%s: err = %v, want agent.ErrEscape", name, err)
		}
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("tar wrote outside /workspace: %v", ents)
	}
	// The connection is still good after refused uploads.
	if err := c.TarIn(ctx, ".", mkTar(t, tarEnt{name: "ok/x", typ: tar.TypeReg, body: "fine"})); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "ok/x")); string(b) != "fine" {
		t.Fatalf("ok/x = %q", b)
	}
	if err := c.TarIn(ctx, "../", mkTar(t)); !errors.Is(err, agent.ErrEscape) {
		t.Fatalf("tar into ../: %v", err)
	}
}

// TarOut archives symlinks as links and never reads through them.
func TestTarOutDoesNotFollowLinks(t *testing.T) {
	c, root := newClient(t)
	must(t, os.Symlink("/etc", filepath.Join(root, "etc")))
	must(t, os.WriteFile(filepath.Join(root, "f"), []byte("data"), 0o640))
	must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "d", "g"), []byte("more"), 0o644))
	r, err := c.TarOut(ctxT(t), ".")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := tar.NewReader(r)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %c %s %s", h.Name, h.Typeflag, h.Linkname, body))
	}
	want := []string{"d/ 5  ", "d/g 0  more", "etc 2 /etc ", "f 0  data"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("entries %q, want %q", got, want)
	}
	// A single file is one entry named by its base name.
	r2, err := c.TarOut(ctxT(t), "d/g")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	h, err := tar.NewReader(r2).Next()
	if err != nil || h.Name != "g" {
		t.Fatalf("single file: %v %v", h, err)
	}
}

// Regression: a reply left in the port by an earlier connection (QEMU hands
// unread guest output to the next host connection) must never be taken as an
// answer on the next one, and junk before the hello must not confuse the guest.
func TestStaleReplyNotTakenByNextConnection(t *testing.T) {
	g := startGuest(t, agentd.ServerOptions{})
	host, guest := socketPair(t)
	// What an earlier session left behind, guest → host: its echoed hello, a
	// yamux data frame and a JSON reply.
	var stale bytes.Buffer
	stale.WriteString(agent.HelloMagic)
	oldNonce := make([]byte, agent.NonceLen)
	rand.Read(oldNonce)
	stale.Write(oldNonce)
	oldReply := []byte(`{"id":1,"health":{"kernel":"stale"}}`)
	hdr := make([]byte, 12)
	hdr[1] = 0 // data frame
	binary.BigEndian.PutUint32(hdr[4:], 1)
	binary.BigEndian.PutUint32(hdr[8:], uint32(4+len(oldReply)))
	stale.Write(hdr)
	binary.Write(&stale, binary.BigEndian, uint32(len(oldReply)))
	stale.Write(oldReply)
	if _, err := guest.Write(stale.Bytes()); err != nil {
		t.Fatal(err)
	}
	// And host → guest: bytes of an aborted earlier hello.
	if _, err := host.Write([]byte("SBXHEL\x00\x00junk")); err != nil {
		t.Fatal(err)
	}
	g.conns <- guest
	ctx := ctxT(t)
	c, err := agent.Connect(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.Ping(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kernel == "stale" || h.Version != agent.ProtocolVersion {
		t.Fatalf("took a stale reply: %+v", h)
	}
}

// Connect gives up when nobody answers, and closes the connection.
func TestConnectTimesOutWithoutGuest(t *testing.T) {
	host, guest := socketPair(t)
	defer guest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := agent.Connect(ctx, host); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	// The host repeated its hello while waiting.
	buf := make([]byte, 4*agent.HelloLen)
	guest.SetReadDeadline(time.Now().Add(time.Second))
	n, _ := io.ReadAtLeast(guest, buf, 2*agent.HelloLen)
	if n < 2*agent.HelloLen || !bytes.Equal(buf[:agent.HelloLen], buf[agent.HelloLen:2*agent.HelloLen]) {
		t.Fatalf("hello not resent with the same nonce: %q", buf[:n])
	}
}

// The guest serves a new connection after the previous one broke mid-call;
// the process started on the broken one keeps running (a gateway restart
// must not kill a box's work) and can be ended from the new connection.
func TestReconnectAfterBrokenConnection(t *testing.T) {
	g := startGuest(t, agentd.ServerOptions{})
	c1 := g.connect(t)
	ctx := ctxT(t)
	p, err := c1.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	if _, err := p.Wait(); err == nil {
		t.Fatal("wait on a closed connection: no error")
	}
	c2 := g.connect(t)
	if _, err := c2.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(p.PID(), 0); err != nil {
		t.Fatalf("process of the broken connection: %v", err)
	}
	_, _, st := run(t, c2, agent.ExecRequest{Argv: []string{"kill", fmt.Sprint(p.PID())}}, "")
	if st.Code != 0 {
		t.Fatalf("kill: %+v", st)
	}
	waitFor(t, func() bool { return unix.Kill(p.PID(), 0) == unix.ESRCH })
}

// Regression (CI, TestBootSmallKernel): the host read the PID reply and
// closed its connection before the guest's yamux reported the write done;
// the guest took the late error for a lost reply and killed the process.
// A process whose PID was sent must survive its connection ending at once.
func TestProcessSurvivesCloseRightAfterExecRegression(t *testing.T) {
	g := startGuest(t, agentd.ServerOptions{})
	ctx := ctxT(t)
	var pids []int
	for range 20 {
		c := g.connect(t)
		p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "100"}})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		pids = append(pids, p.PID())
	}
	time.Sleep(200 * time.Millisecond)
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); err != nil {
			t.Errorf("process %d after its connection closed: %v", pid, err)
		}
		unix.Kill(pid, unix.SIGKILL)
	}
}

func TestConcurrentRequestsOnOneConnection(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("f%d", i)
			want := strings.Repeat(name, 1000)
			if err := c.WriteFile(ctx, name, 0, strings.NewReader(want)); err != nil {
				errs <- err
				return
			}
			p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"cat", name}})
			if err != nil {
				errs <- err
				return
			}
			p.Stdin().Close()
			out, _ := io.ReadAll(p.Stdout())
			if st, err := p.Wait(); err != nil || st.Code != 0 || string(out) != want {
				errs <- fmt.Errorf("exec %d: %v %+v, %d bytes", i, err, st, len(out))
			}
			r, err := c.ReadFile(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(b) != want {
				errs <- fmt.Errorf("read %d: %v", i, err)
			}
			if fi, err := c.Stat(ctx, name); err != nil || fi.Size != int64(len(want)) {
				errs <- fmt.Errorf("stat %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Abandoning a download halfway frees the guest side.
func TestAbandonedDownload(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	must(t, os.WriteFile(filepath.Join(root, "big"), make([]byte, 20<<20), 0o644))
	r, err := c.ReadFile(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 1000))
	r.Close()
	// The connection still answers promptly.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Ping(cctx); err != nil {
		t.Fatal(err)
	}
}

func TestReseed(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	seed := make([]byte, 64)
	rand.Read(seed)
	if err := c.Reseed(ctx, seed); err != nil {
		t.Fatal(err)
	}
	if err := c.Reseed(ctx, nil); err == nil {
		t.Fatal("empty seed accepted")
	}
}

func TestSetClockAndShutdownHooks(t *testing.T) {
	var got time.Time
	var shut bool
	var mu sync.Mutex
	g := startGuest(t, agentd.ServerOptions{
		SetClock: func(t time.Time) error { mu.Lock(); got = t; mu.Unlock(); return nil },
		Shutdown: func(context.Context) error { mu.Lock(); shut = true; mu.Unlock(); return nil },
	})
	c := g.connect(t)
	ctx := ctxT(t)
	want := time.Date(2031, 2, 3, 4, 5, 6, 7, time.UTC)
	if err := c.SetClock(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !got.Equal(want) || !shut {
		t.Fatalf("clock %v shut %v", got, shut)
	}
}

// The PID 1 reaper reaps orphans without stealing the exit status of
// processes the agent started. It runs in a child process made a subreaper,
// because reaping every child would disturb this test process.
func TestChildReaperKeepsExitStatus(t *testing.T) {
	if os.Getenv("SBX_REAPER_CHILD") == "1" {
		reaperChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildReaperKeepsExitStatus$")
	cmd.Env = append(os.Environ(), "SBX_REAPER_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reaper child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "REAPER OK") {
		t.Fatalf("reaper child output: %s", out)
	}
}

func reaperChild() {
	fail := func(format string, a ...any) { fmt.Printf(format+"\n", a...); os.Exit(1) }
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fail("subreaper: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reaper := agentd.NewChildReaper(ctx, nil)
	root, _ := os.MkdirTemp("", "reaper")
	defer os.RemoveAll(root)
	conns := make(chan io.ReadWriteCloser, 1)
	go agentd.Serve(ctx, agentd.PortOpenerFunc(func(ctx context.Context) (io.ReadWriteCloser, error) {
		select {
		case c := <-conns:
			return c, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}), agentd.ServerOptions{Root: root, Reaper: reaper})
	fds, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	unix.SetNonblock(fds[0], true)
	unix.SetNonblock(fds[1], true)
	conns <- os.NewFile(uintptr(fds[1]), "guest")
	c, err := agent.Connect(ctx, os.NewFile(uintptr(fds[0]), "host"))
	if err != nil {
		fail("connect: %v", err)
	}
	for i := range 20 {
		// Each run leaves an orphan that exits while the reaper is busy.
		p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.0%d & exit %d", i%10, 7+i%3)}})
		if err != nil {
			fail("exec: %v", err)
		}
		p.Stdin().Close()
		io.Copy(io.Discard, p.Stdout())
		st, err := p.Wait()
		if err != nil || st.Code != 7+i%3 {
			fail("run %d: status %+v, err %v", i, st, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	// No zombies left: every child was reaped.
	ents, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range ents {
		b, _ := os.ReadFile(e)
		f := strings.Fields(string(b))
		if len(f) > 3 && f[2] == "Z" && f[3] == fmt.Sprint(os.Getpid()) {
			fail("zombie left: %s", b)
		}
	}
	fmt.Println("REAPER OK")
}

// Every Exec with its Wait releases its four streams on the host.
func TestExecReleasesStreams(t *testing.T) {
	c, _ := newClient(t)
	for range 10 {
		p, err := c.Exec(ctxT(t), agent.ExecRequest{Argv: []string{"echo", "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatal(err)
		}
		if out, _ := io.ReadAll(p.Stdout()); string(out) != "hi\n" {
			t.Fatalf("output after Wait: %q", out)
		}
	}
	waitFor(t, func() bool { return c.OpenStreams() == 0 })
}

// The host resends its hello while the guest boots: the guest echoes it
// once and hands yamux the first byte after the repeats.
func TestGuestSkipsRepeatedHellos(t *testing.T) {
	host, guest := socketPair(t)
	defer host.Close()
	hello := []byte(agent.HelloMagic + "0123456789abcdef")
	newer := []byte(agent.HelloMagic + "fedcba9876543210")
	in := bytes.Join([][]byte{[]byte("junk"), hello, hello, hello, newer, {0, 1, 2}}, nil)
	if _, err := host.Write(in); err != nil {
		t.Fatal(err)
	}
	gc, err := agent.GuestHandshake(guest)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	first := make([]byte, 3)
	if _, err := io.ReadFull(gc, first); err != nil || !bytes.Equal(first, []byte{0, 1, 2}) {
		t.Fatalf("first bytes after the hellos: %v %v", first, err)
	}
	// Echoed: the first hello once, and the newer one (a new host) once.
	want := append(append([]byte{}, hello...), newer...)
	got := make([]byte, len(want))
	host.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := io.ReadFull(host, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("echo %q, %v; want %q", got, err, want)
	}
	host.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := host.Read(make([]byte, 1)); n != 0 {
		t.Fatal("more than one echo per hello")
	}
}

func TestReadDirLarge(t *testing.T) {
	c, root := newClient(t)
	const n = 2500 // more than two batches
	for i := range n {
		must(t, os.WriteFile(filepath.Join(root, fmt.Sprintf("file-%05d-with-a-longish-name.txt", i)), nil, 0o644))
	}
	infos, err := c.ReadDir(ctxT(t), ".")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != n || infos[0].Name != "file-00000-with-a-longish-name.txt" || infos[n-1].Name != fmt.Sprintf("file-%05d-with-a-longish-name.txt", n-1) {
		t.Fatalf("got %d entries", len(infos))
	}
}

func TestErrorKindsCrossTheWire(t *testing.T) {
	for _, tc := range []struct {
		err    error
		target error
	}{
		{unix.ENOENT, fs.ErrNotExist},
		{unix.EACCES, fs.ErrPermission},
		{unix.EPERM, fs.ErrPermission},
		{unix.EEXIST, fs.ErrExist},
		{fmt.Errorf("x: %w", agent.ErrEscape), agent.ErrEscape},
		{fmt.Errorf("bad: %w", fs.ErrInvalid), fs.ErrInvalid},
	} {
		err := agent.ToWire(&fs.PathError{Op: "open", Path: "p", Err: tc.err}).Err("stat", "p")
		if !errors.Is(err, tc.target) {
			t.Errorf("%v crossed as %v, not %v", tc.err, err, tc.target)
		}
		for _, other := range []error{fs.ErrNotExist, fs.ErrPermission, fs.ErrExist, agent.ErrEscape} {
			if other != tc.target && errors.Is(err, other) {
				t.Errorf("%v also matches %v", tc.err, other)
			}
		}
	}
}

// Bad input gets a one-line error naming the path, and loses nothing.
func TestBadInputErrors(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	must(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "dir", "keep"), []byte("k"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "file"), []byte("f"), 0o644))
	_, errRead := c.ReadFile(ctx, "dir")
	_, errExec := c.Exec(ctx, agent.ExecRequest{})
	_, errDir := c.Exec(ctx, agent.ExecRequest{Argv: []string{"true"}, Dir: "file"})
	for name, err := range map[string]error{
		"write over a directory": c.WriteFile(ctx, "dir", 0, strings.NewReader("x")),
		"read a directory":       errRead,
		"mkdir over a file":      c.MkdirAll(ctx, "file/sub", 0),
		"remove the root":        c.Remove(ctx, "/workspace"),
		"empty argv":             errExec,
		"exec dir is a file":     errDir,
		"tar into a file":        c.TarIn(ctx, "file", mkTar(t)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: multi-line error %q", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "dir", "keep")); err != nil || string(b) != "k" {
		t.Fatalf("a refused call lost data: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "file")); string(b) != "f" {
		t.Fatal("a refused call changed a file")
	}
}

// Regression (seen in the conformance suite under load): Resize returned
// before the guest applied it, so input sent right after could run at the
// old size. Resize now waits for the guest's acknowledgement.
func TestResizeAppliedBeforeLaterInput(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	for i := range 10 {
		p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh"}, TTY: true, Rows: 24, Cols: 80})
		if err != nil {
			t.Fatal(err)
		}
		out := &testutil.SyncBuffer{}
		copied := make(chan struct{})
		go func() { io.Copy(out, p.Stdout()); close(copied) }()
		rows, cols := uint16(40+i), uint16(100+i)
		if err := p.Resize(ctx, rows, cols); err != nil {
			t.Fatal(err)
		}
		io.WriteString(p.Stdin(), "stty size; exit\n")
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			t.Fatalf("%+v %v", st, err)
		}
		<-copied
		if want := fmt.Sprintf("%d %d", rows, cols); !strings.Contains(out.String(), want) {
			t.Fatalf("run %d: output %q lacks %q", i, out.String(), want)
		}
	}
	// Without a tty a resize is refused, clearly.
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "10"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx, 10, 10); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("resize without a tty: %v", err)
	}
	p.Signal(ctx, syscall.SIGKILL)
	p.Wait()
}
