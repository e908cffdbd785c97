package qemu

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/image"
	"sbx.dev/sbx/vm/kernel"
)

// testKernel returns the small kernel when built, else the stock one.
func testKernel(t *testing.T) kernel.Kernel {
	if k, ok := smallKernel(); ok {
		return k
	}
	k, err := kernel.Stock(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRecover: at start, a QEMU under the data dir that belongs to no box is
// killed, a box whose QEMU vanished is marked failed with the reason, and a
// half-created directory without a record is removed. No guest boots.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	k := testKernel(t)
	init := testInit(t)
	boxes := filepath.Join(dir, "boxes")

	// A stray QEMU (paused, no guest) whose QMP socket is under our data dir.
	ghost := filepath.Join(boxes, "ghost")
	os.MkdirAll(ghost, 0o700)
	stray := exec.Command("qemu-system-x86_64", "-M", "microvm", "-nodefaults", "-no-user-config",
		"-display", "none", "-S", "-qmp", "unix:"+filepath.Join(ghost, qmpSock)+",server=on,wait=off")
	stray.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- stray.Wait() }()
	defer stray.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for qmpPathOf(cmdline(stray.Process.Pid)) == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	// A running box whose QEMU is gone (pid of an exited process).
	gone := filepath.Join(boxes, "gone")
	os.MkdirAll(gone, 0o700)
	dead := exec.Command("true")
	dead.Run()
	rec := record{Box: vm.Box{Name: "gone", State: vm.Running, Spec: vm.Spec{MemoryMiB: 256}}, PID: dead.Process.Pid, SockDir: gone}
	b, _ := json.Marshal(rec)
	os.WriteFile(filepath.Join(gone, recordFile), b, 0o600)

	// A sleeping box stays asleep.
	asleep := filepath.Join(boxes, "asleep")
	os.MkdirAll(asleep, 0o700)
	rec = record{Box: vm.Box{Name: "asleep", State: vm.Sleeping, Spec: vm.Spec{MemoryMiB: 256}}, SockDir: asleep}
	b, _ = json.Marshal(rec)
	os.WriteFile(filepath.Join(asleep, recordFile), b, 0o600)

	// A running box whose QEMU ended after its sleep snapshot was complete
	// (the gateway died mid-sleep): it is asleep.
	midSleep := filepath.Join(boxes, "midsleep")
	os.MkdirAll(midSleep, 0o700)
	rec = record{Box: vm.Box{Name: "midsleep", State: vm.Running, Spec: vm.Spec{MemoryMiB: 256}}, PID: dead.Process.Pid,
		SockDir: midSleep, Machine: machine{QEMU: "qemu-system-x86_64"}}
	b, _ = json.Marshal(rec)
	os.WriteFile(filepath.Join(midSleep, recordFile), b, 0o600)
	os.WriteFile(filepath.Join(midSleep, snapFile), []byte("snapshot"), 0o600)

	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: init, Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("stray qemu with no box still runs after recovery")
	}
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Errorf("directory without a record kept: %v", err)
	}
	g, err := m.Get("gone")
	if err != nil || g.State != vm.Failed || !strings.Contains(g.Reason, "was gone when the gateway restarted") {
		t.Errorf("box with a vanished qemu: %+v %v", g, err)
	}
	if ms, err := m.Get("midsleep"); err != nil || ms.State != vm.Sleeping {
		t.Errorf("box whose gateway died mid-sleep: %+v %v", ms, err)
	}
	a, err := m.Get("asleep")
	if err != nil || a.State != vm.Sleeping {
		t.Errorf("sleeping box: %+v %v", a, err)
	}
	// The record on disk says the same, so a second restart agrees.
	var onDisk record
	b, _ = os.ReadFile(filepath.Join(gone, recordFile))
	json.Unmarshal(b, &onDisk)
	if onDisk.Box.State != vm.Failed {
		t.Errorf("record on disk: %+v", onDisk.Box)
	}
}

// agentImage finds the Debian agent image built by `go tool -modfile=tools/go.mod task image`.
func agentImage() (string, bool) {
	for _, d := range []string{os.Getenv("SBX_DATA"), "../../.sbx"} {
		if d == "" {
			continue
		}
		if img, err := image.Resolve(d, image.Agent); err == nil {
			p, _ := filepath.Abs(img.Path)
			return p, true
		}
	}
	return "", false
}

// TestAgentImage boots the Debian agent image under a per-box overlay and
// runs git and node in it; the shared image is not written.
func TestAgentImage(t *testing.T) {
	imgPath, ok := agentImage()
	if !ok {
		t.Skip("agent image not built (go tool -modfile=tools/go.mod task image)")
	}
	before, err := os.Stat(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "images"), 0o755)
	if err := os.Symlink(imgPath, filepath.Join(dir, "images", "agent.ext4")); err != nil {
		t.Fatal(err)
	}
	k := testKernel(t)
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, f := range []string{logFile, consoleFile} {
				b, _ := os.ReadFile(filepath.Join(dir, "boxes", "debian", f))
				t.Logf("%s:\n%s", f, b)
			}
		}
	}()
	m, err := vm.New(context.Background(), vm.Config{Backend: be, BootTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	if _, err := m.Create(ctx, "debian", vm.Spec{Image: "agent", MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if !t.Failed() {
			m.Destroy(ctx, "debian")
		}
	}()
	t0 := time.Now()
	if _, err := m.Start(ctx, "debian"); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent image boot: %v", time.Since(t0))
	// An image box boots the initramfs without busybox (2 MB less to
	// unpack): the image has its own shell.
	if bx, _ := be.get("debian"); bx.rec.Machine.Initramfs == be.Initramfs() && be.boot.ImageInitramfs != be.boot.Initramfs {
		t.Errorf("image box booted %s, the initramfs with busybox", bx.rec.Machine.Initramfs)
	}
	if ls, _ := os.Stat(be.boot.ImageInitramfs); ls != nil {
		if ps, _ := os.Stat(be.boot.Initramfs); ps != nil && ps.Size()-ls.Size() < 1<<20 && busyboxFound() {
			t.Errorf("image initramfs %d bytes, plain %d: busybox was not left out", ls.Size(), ps.Size())
		}
	}
	for _, argv := range [][]string{{"git", "--version"}, {"node", "--version"}} {
		p, err := m.Exec(ctx, "debian", agent.ExecRequest{Argv: argv})
		if err != nil {
			t.Fatal(err)
		}
		p.Stdin().Close()
		out := &strings.Builder{}
		done := make(chan struct{})
		go func() { copyAll(out, p); close(done) }()
		st, err := p.Wait()
		<-done
		if err != nil || st.Code != 0 || strings.TrimSpace(out.String()) == "" {
			t.Fatalf("%q: %+v %v %q", argv, st, err, out)
		}
		t.Logf("%q: %s", argv, strings.TrimSpace(out.String()))
	}
	after, _ := os.Stat(imgPath)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the shared image was modified")
	}
}

func copyAll(w *strings.Builder, p *agent.Process) {
	buf := make([]byte, 4096)
	for {
		n, err := p.Stdout().Read(buf)
		w.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// TestNewWithoutQEMU: a host without QEMU gets an error naming the fix.
func TestNewWithoutQEMU(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	k := kernel.Kernel{Kind: kernel.KindSmall, Path: "/nonexistent"}
	_, err := New(context.Background(), Config{DataDir: t.TempDir(), Kernel: &k, Initramfs: "/nonexistent"})
	if err == nil || !strings.Contains(err.Error(), "install qemu-system-x86 (go tool -modfile=tools/go.mod task deps)") {
		t.Fatalf("New without QEMU: %v", err)
	}
}

// TestCreateBadImage: an unknown image is refused and leaves no directory.
func TestCreateBadImage(t *testing.T) {
	dir := t.TempDir()
	k := testKernel(t)
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, img := range []string{"nosuch", "../../etc", "agent"} {
		if img == "agent" {
			if _, ok := agentImage(); ok {
				continue
			}
		}
		_, err := m.Create(context.Background(), "b", vm.Spec{Image: img})
		if err == nil {
			t.Fatalf("image %q accepted", img)
		}
		t.Logf("image %q: %v", img, err)
		if _, serr := os.Stat(filepath.Join(dir, "boxes", "b")); !os.IsNotExist(serr) {
			t.Fatalf("refused box left its directory")
		}
		if _, gerr := m.Get("b"); gerr == nil {
			t.Fatalf("refused box listed")
		}
	}
}

// TestNewDynamicInit: a dynamically linked /init is refused with the fix.
func TestNewDynamicInit(t *testing.T) {
	k := testKernel(t)
	_, err := New(context.Background(), Config{DataDir: t.TempDir(), Kernel: &k, Init: "/usr/bin/qemu-img", Accel: "tcg"})
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("dynamic init: %v", err)
	}
}

// TestLongName: a 128-character name passes the unix socket path limit by
// moving its sockets under <data>/run/, and the box works.
func TestLongName(t *testing.T) {
	dir := t.TempDir()
	k := testKernel(t)
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(t), Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be, BootTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	name := strings.Repeat("n", 128)
	if _, err := m.Create(ctx, name, vm.Spec{WorkspaceMiB: 32}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	p, err := m.Exec(ctx, name, agent.ExecRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("true: %+v %v", st, err)
	}
	runs, _ := filepath.Glob(filepath.Join(dir, "run", "*", agentSock))
	if len(runs) != 1 {
		t.Fatalf("agent socket not under run/: %v", runs)
	}
	if err := m.Destroy(ctx, name); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "run", "*")); len(left) != 0 {
		t.Fatalf("destroy left %v", left)
	}
}

func busyboxFound() bool {
	bb, err := exec.LookPath("busybox")
	return err == nil && checkStatic(bb) == nil
}
