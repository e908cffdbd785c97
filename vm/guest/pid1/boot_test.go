package pid1_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/guest/pid1"
	"sbx.dev/sbx/vm/initramfs"
	"sbx.dev/sbx/vm/kernel"
)

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pid1.Cmdline
	}{
		{"console=hvc0 quiet", pid1.Cmdline{}},
		{"sbx.debug=1", pid1.Cmdline{Debug: true}},
		{"sbx.debug=0 sbx.modules=", pid1.Cmdline{}},
		{"sbx.modules=virtio_mmio,virtio_console.ko,,ext4 x=y", pid1.Cmdline{Modules: []string{"virtio_mmio", "virtio_console.ko", "ext4"}}},
		{"sbx.debugx=1 sbx.debug", pid1.Cmdline{Debug: true}},
		{"quiet sbx.net=1", pid1.Cmdline{Net: true}},
		{"sbx.net=0 sbx.net", pid1.Cmdline{}},
	} {
		got := pid1.ParseCmdline(tc.in)
		if got.Debug != tc.want.Debug || got.Net != tc.want.Net || strings.Join(got.Modules, ",") != strings.Join(tc.want.Modules, ",") {
			t.Errorf("ParseCmdline(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// box is a guest booted by hand: QEMU microvm under TCG with the stock
// kernel, our initramfs, a workspace disk and the agent port on a socket.
type box struct {
	cmd     *exec.Cmd
	dir     string
	ws      string
	console *testutil.SyncBuffer
	exited  chan error
	client  *agent.Client
	sock    string
	booted  time.Duration // start to first agent reply
}

// reconnect drops the agent connection and makes a new one, as a gateway
// restart does.
func (b *box) reconnect(t testing.TB) {
	t.Helper()
	b.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := net.Dial("unix", b.sock)
	if err != nil {
		t.Fatalf("redial: %v", err)
	}
	if b.client, err = agent.Connect(ctx, conn); err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	if _, err := b.client.Ping(ctx); err != nil {
		t.Fatalf("ping after reconnect: %v", err)
	}
}

func cacheDir(t testing.TB) string {
	d := filepath.Join(os.TempDir(), "sbx-guest-test-cache")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func mkfs(t testing.TB, path string, sizeMB int, from string) {
	t.Helper()
	args := []string{"-q", "-F", "-t", "ext4", "-E", "root_owner=0:0"}
	if from != "" {
		args = append(args, "-d", from)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(sizeMB)<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mkfs.ext4", append(args, path)...).CombinedOutput()
	if err != nil {
		t.Fatalf("mkfs.ext4 (apt-get install e2fsprogs): %v\n%s", err, out)
	}
}

func hostKHz() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

func stockKernel(t testing.TB) kernel.Kernel {
	k, err := kernel.Stock(cacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// bootBox boots a guest; rootImage, when set, is attached as sbx-root.
func bootBox(t testing.TB, k kernel.Kernel, rootImage string) *box {
	t.Helper()
	testutil.SkipShort(t, "boots a QEMU VM")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64 not found (apt-get install qemu-system-x86): %v", err)
	}
	dir := t.TempDir()
	initrd, err := initramfs.Build(context.Background(), filepath.Join(cacheDir(t), "initramfs"), initramfs.Options{
		Init:    initramfs.BuildTestBinary(t),
		Busybox: "/bin/busybox",
		Modules: k.Modules,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, m := range k.Modules {
		mods = append(mods, strings.TrimSuffix(filepath.Base(m), ".ko"))
	}
	b := &box{dir: dir, ws: filepath.Join(dir, "workspace.ext4"), console: &testutil.SyncBuffer{}, exited: make(chan error, 1)}
	mkfs(t, b.ws, 64, "")
	mach := "microvm,x-option-roms=off,isa-serial=off,rtc=on"
	appendLine := []string{"console=hvc0", "quiet", "reboot=t", "panic=-1", "no_timer_check"}
	if _, bench := t.(*testing.B); !bench {
		appendLine = append(appendLine, "sbx.debug=1") // a log line per call would skew benchmarks
	}
	if k.Kind == kernel.KindSmall {
		mach = "microvm,x-option-roms=off,pit=on,pic=on,isa-serial=off,rtc=on,acpi=off"
		appendLine = append(appendLine, "nolapic_timer")
	} else {
		appendLine = append(appendLine, "sbx.modules="+strings.Join(mods, ","))
	}
	if khz := hostKHz(); khz > 0 {
		appendLine = append(appendLine, "tsc_early_khz="+strconv.Itoa(khz))
	}
	sock := filepath.Join(dir, "agent.sock")
	b.sock = sock
	args := []string{
		"-M", mach, "-accel", "tcg", "-cpu", "max,erms=off,fsrm=off", "-m", "256M", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", k.Path, "-initrd", initrd, "-append", strings.Join(appendLine, " "),
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "stdio,id=con,signal=off",
		"-device", "virtconsole,chardev=con",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=" + pid1.AgentPort,
		"-drive", "id=ws,if=none,format=raw,file=" + b.ws,
		"-device", "virtio-blk-device,drive=ws,serial=" + pid1.WorkspaceSerial,
	}
	if rootImage != "" {
		args = append(args,
			"-drive", "id=root,if=none,format=raw,file="+rootImage,
			"-device", "virtio-blk-device,drive=root,serial="+pid1.RootSerial)
	}
	b.cmd = exec.Command(qemu, args...)
	b.cmd.Stdout = b.console
	b.cmd.Stderr = b.console
	start := time.Now()
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.exited
		if t.Failed() {
			t.Logf("console:\n%s", b.console.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var conn net.Conn
	for conn == nil {
		if conn, err = net.Dial("unix", sock); err != nil {
			conn = nil
			select {
			case <-ctx.Done():
				t.Fatalf("agent socket: %v", err)
			case err := <-b.exited:
				t.Fatalf("qemu exited: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	b.client, err = agent.Connect(ctx, conn)
	if err != nil {
		// Tell a guest that died (QEMU exits: -no-reboot, panic=-1) from
		// a connection QEMU dropped while running.
		select {
		case xerr := <-b.exited:
			b.exited <- xerr
			t.Fatalf("connect: %v (QEMU exited: %v)", err, xerr)
		case <-time.After(2 * time.Second):
			t.Fatalf("connect: %v (QEMU still running)", err)
		}
	}
	t.Cleanup(func() { b.client.Close() })
	h, err := b.client.Ping(ctx)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	b.booted = time.Since(start)
	if k.Release != "" && h.Kernel != k.Release {
		t.Errorf("guest kernel %q, want %q", h.Kernel, k.Release)
	}
	t.Logf("%s kernel %s, TCG: first agent reply after %v", k.Kind, k.Release, b.booted.Round(time.Millisecond))
	return b
}

func (b *box) run(t testing.TB, argv ...string) string {
	t.Helper()
	return b.runAs(t, "", argv...)
}

// runAs runs argv as user (ExecRequest.User) and returns its stdout; a
// failure ends the test.
func (b *box) runAs(t testing.TB, user string, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.client.Exec(ctx, agent.ExecRequest{Argv: argv, User: user})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	p.Stdin().Close()
	var out, errOut bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); io.Copy(&errOut, p.Stderr()) }()
	io.Copy(&out, p.Stdout())
	wg.Wait()
	st, err := p.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("exec %q: %+v %v\nstdout %s\nstderr %s", argv, st, err, out.String(), errOut.String())
	}
	return out.String()
}

// shutdown powers the guest off through the agent and waits for QEMU to end.
func (b *box) shutdown(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.client.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case err := <-b.exited:
		b.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("qemu after shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("guest did not power off within 30 s")
	}
}

// debugfsCat reads a file from an ext4 image on the host.
func debugfsCat(t *testing.T, image, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, image).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

func TestBootStockInitramfs(t *testing.T) { checkGuest(t, bootBox(t, stockKernel(t), "")) }

// The small kernel (go tool -modfile=tools/go.mod task kernel) has everything built in: no
// modules, no ACPI, power-off by reboot=t.
func TestBootSmallKernel(t *testing.T) {
	k, ok := smallKernel()
	if !ok {
		t.Skip("small kernel not built (go tool -modfile=tools/go.mod task kernel)")
	}
	checkGuest(t, bootBox(t, k, ""))
}

// smallKernel finds the small kernel `task kernel` installed ($SBX_DATA or
// the repository's .sbx), else one in its build cache
// (${SBX_CACHE:-~/.cache/sbx}, which may hold older builds too).
func smallKernel() (kernel.Kernel, bool) {
	for _, d := range []string{os.Getenv("SBX_DATA"), "../../../.sbx"} {
		if d == "" {
			continue
		}
		if k, err := kernel.Small(d); err == nil {
			k.Path, _ = filepath.Abs(k.Path)
			return k, true
		}
	}
	cache := os.Getenv("SBX_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache/sbx")
	}
	paths, _ := filepath.Glob(filepath.Join(cache, "kernel/*/vmlinux"))
	if len(paths) == 0 {
		return kernel.Kernel{}, false
	}
	return kernel.Kernel{Kind: kernel.KindSmall, Path: paths[0]}, true
}

// benchKernel is the small kernel when built, else the stock one.
func benchKernel(b *testing.B) kernel.Kernel {
	if k, ok := smallKernel(); ok {
		return k
	}
	return stockKernel(b)
}

// BenchmarkGuestExecTrue is the exec round trip of `true` in a real guest
// over virtio-serial.
func BenchmarkGuestExecTrue(b *testing.B) {
	bx := bootBox(b, benchKernel(b), "")
	b.ResetTimer()
	for b.Loop() {
		bx.run(b, "true")
	}
}

// BenchmarkGuestReadFile is ReadFile throughput out of a real guest.
func BenchmarkGuestReadFile(b *testing.B) {
	bx := bootBox(b, benchKernel(b), "")
	const size = 16 << 20
	bx.run(b, "sh", "-c", "head -c "+strconv.Itoa(size)+" /dev/urandom > /workspace/big")
	ctx := context.Background()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		r, err := bx.client.ReadFile(ctx, "big")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, r); err != nil || n != size {
			b.Fatal(n, err)
		}
		r.Close()
	}
}

func checkGuest(t *testing.T, b *box) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := b.client

	// PID 1 is sbx; mounts, hostname, lo.
	if got := b.run(t, "cat", "/proc/1/comm"); !strings.HasPrefix(got, "init") {
		t.Errorf("pid 1 is %q", got)
	}
	// Regression (init stderr on /dev/null): when hvc0 came up after the
	// kernel started init, fds 1-2 stayed the runtime's /dev/null and a Go
	// fatal error left only "Attempted to kill init! exitcode=0x00000200".
	for _, fd := range []string{"1", "2"} {
		if got := strings.TrimSpace(b.run(t, "readlink", "/proc/1/fd/"+fd)); got != "/dev/console" {
			t.Errorf("init's fd %s is %q, want /dev/console", fd, got)
		}
	}
	mounts := b.run(t, "cat", "/proc/mounts")
	for _, want := range []string{"/workspace ext4", "/proc proc", "/sys sysfs", "/dev devtmpfs", "/dev/pts devpts", "/tmp tmpfs", "/run tmpfs"} {
		if !strings.Contains(mounts, want) {
			t.Errorf("mounts lack %q:\n%s", want, mounts)
		}
	}
	if got := strings.TrimSpace(b.run(t, "hostname")); got != "sbx" {
		t.Errorf("hostname %q", got)
	}
	if got := strings.TrimSpace(b.run(t, "cat", "/sys/class/net/lo/flags")); got != "0x9" {
		t.Errorf("lo flags %s, want 0x9 (up, loopback)", got)
	}
	env := b.run(t, "env")
	for _, want := range []string{"HOME=/root", "PATH=/usr/local/sbin:"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}

	// The unprivileged user exists in the initramfs root too (the init
	// writes it at boot) and owns its home; the workspace's top is root's
	// and sticky, with the decision log root's in it.
	if got := b.runAs(t, agent.AgentUser, "sh", "-c",
		"id -u; id -g; grep -E '^(CapBnd|CapEff|NoNewPrivs):' /proc/self/status; echo x > /workspace/agent-x && echo x > $HOME/x && echo written; cat /proc/1/environ 2>/dev/null || echo no-environ"); got != "1000\n1000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nwritten\nno-environ\n" {
		t.Errorf("as %s in the initramfs root: %q", agent.AgentUser, got)
	}
	if got := b.run(t, "sh", "-c", "grep ^agent: /etc/passwd /etc/group; stat -c '%A %u %g' /home/agent /workspace /workspace/.agent.hooks.log"); got != "/etc/passwd:agent:x:1000:1000:sbx agent:/home/agent:/bin/sh\n/etc/group:agent:x:1000:\ndrwx------ 1000 1000\ndrwxrwxrwt 0 0\n-rw-r--r-- 0 0\n" {
		t.Errorf("the agent user in the initramfs root: %q", got)
	}

	// PTY size inside a real guest.
	p, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"stty", "size"}, TTY: true, Rows: 33, Cols: 111})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	if st, err := p.Wait(); err != nil || st.Code != 0 || !strings.Contains(string(out), "33 111") {
		t.Errorf("stty size: %q %+v %v", out, st, err)
	}

	// Orphans are reaped without stealing exit statuses.
	p, err = c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.2 & exit 5"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin().Close()
	io.Copy(io.Discard, p.Stdout())
	if st, err := p.Wait(); err != nil || st.Code != 5 {
		t.Errorf("exit status with an orphan: %+v %v", st, err)
	}
	time.Sleep(time.Second)
	if ps := b.run(t, "ps", "-o", "pid,stat,comm"); strings.Contains(ps, " Z ") {
		t.Errorf("zombie left:\n%s", ps)
	}

	// Confinement in the guest: /etc is out of reach.
	if _, err := c.ReadFile(ctx, "/etc/passwd"); !errors.Is(err, agent.ErrEscape) {
		t.Errorf("read /etc/passwd: %v", err)
	}
	b.run(t, "ln", "-s", "/etc", "/workspace/etc")
	if _, err := c.Stat(ctx, "etc/passwd"); !errors.Is(err, agent.ErrEscape) {
		t.Errorf("stat through a symlink to /etc: %v", err)
	}

	// Clock and entropy.
	if err := c.SetClock(ctx, time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(b.run(t, "date", "-u", "+%Y-%m-%d")); got != "2031-01-02" {
		t.Errorf("guest date after SetClock: %s", got)
	}
	if err := c.SetClock(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	if err := c.Reseed(ctx, seed); err != nil {
		t.Fatal(err)
	}

	// The guest takes a new host connection after the old one went away,
	// and a process started before keeps running.
	sleeper, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.reconnect(t)
	}
	c = b.client
	if out := b.run(t, "sh", "-c", fmt.Sprintf("kill -0 %d && echo alive", sleeper.PID())); out != "alive\n" {
		t.Errorf("process across reconnects: %q", out)
	}

	// A file written through the agent survives a clean power-off, and the
	// file system is clean even with a writer busy until the end.
	want := fmt.Sprintf("written at %v\n", time.Now())
	if err := c.WriteFile(ctx, "hello.txt", 0o644, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	busy, err := c.Exec(ctx, agent.ExecRequest{Argv: []string{"sh", "-c", "while :; do echo x >> /workspace/busy; sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Wait()
	b.shutdown(t)
	if got := debugfsCat(t, b.ws, "/hello.txt"); got != want {
		t.Fatalf("workspace after power-off: %q, want %q", got, want)
	}
	if out, err := exec.Command("e2fsck", "-fn", b.ws).CombinedOutput(); err != nil {
		t.Fatalf("workspace not clean after power-off: %v\n%s", err, out)
	}
}

// With an sbx-root disk the init switches into it and stays PID 1.
func TestBootSwitchesIntoRootImage(t *testing.T) {
	src := t.TempDir()
	for _, d := range []string{"bin", "etc", "dev", "proc", "sys", "run", "tmp", "root", "workspace"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is needed (apt-get install busybox-static): %v", err)
	}
	os.WriteFile(filepath.Join(src, "bin/busybox"), bb, 0o755)
	for _, a := range []string{"sh", "cat", "ls", "stat", "readlink", "cmp"} {
		os.Symlink("busybox", filepath.Join(src, "bin", a))
	}
	os.WriteFile(filepath.Join(src, "etc/os-release"), []byte("ID=sbx-test-root\n"), 0o644)
	root := filepath.Join(t.TempDir(), "root.ext4")
	mkfs(t, root, 32, src)

	b := bootBox(t, stockKernel(t), root)
	if got := b.run(t, "cat", "/etc/os-release"); got != "ID=sbx-test-root\n" {
		t.Errorf("root is not the image: os-release %q", got)
	}
	if got := b.run(t, "ls", "/"); strings.Contains(got, "init\n") || strings.Contains(got, "newroot") {
		t.Errorf("initramfs still visible at /:\n%s", got)
	}
	if got := b.run(t, "stat", "-c", "%s %a", pid1.InstalledPath); !strings.HasSuffix(strings.TrimSpace(got), "755") ||
		strings.HasPrefix(got, "0 ") {
		t.Errorf("%s: %q", pid1.InstalledPath, got)
	}
	// It is the running init, read-only: the agent cannot swap the binary
	// its hooks run.
	if got := b.run(t, "sh", "-c", "cat /proc/1/exe | cmp - "+pid1.InstalledPath+" && echo same"); got != "same\n" {
		t.Errorf("%s is not the running init: %q", pid1.InstalledPath, got)
	}
	if got := b.run(t, "sh", "-c", "if echo x 2>/dev/null >"+pid1.InstalledPath+"; then echo written; fi"); strings.Contains(got, "written") {
		t.Errorf("%s is writable", pid1.InstalledPath)
	}
	mounts := b.run(t, "cat", "/proc/mounts")
	for _, want := range []string{"/workspace ext4", "/ ext4", "/proc proc", "/dev devtmpfs"} {
		if !strings.Contains(mounts, want) {
			t.Errorf("mounts lack %q:\n%s", want, mounts)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.client.WriteFile(ctx, "/workspace/x", 0, strings.NewReader("y")); err != nil {
		t.Fatal(err)
	}
	b.shutdown(t)
	if got := debugfsCat(t, b.ws, "/x"); got != "y" {
		t.Fatalf("workspace after power-off: %q", got)
	}
}

// BenchmarkGuestPing is one request/reply over virtio-serial.
func BenchmarkGuestPing(b *testing.B) {
	bx := bootBox(b, benchKernel(b), "")
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := bx.client.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// The guest's copy of the egress contract matches vm's.
func TestGatewayMatchesVM(t *testing.T) {
	if pid1.GatewayIP != vm.EgressIP || pid1.GatewayName != vm.EgressHostname {
		t.Fatalf("guest %s %s, vm %s %s", pid1.GatewayIP, pid1.GatewayName, vm.EgressIP, vm.EgressHostname)
	}
}
