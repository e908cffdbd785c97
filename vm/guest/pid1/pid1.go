// Package pid1 is the sbx binary's life as PID 1 inside a box: mount what
// the box needs, load the stock kernel's modules, find the disks by serial,
// optionally switch into the image's root filesystem, then serve the host's
// agent protocol on the sbx.agent port. PID 1 never exits: a fatal error is
// logged to the console and the machine powers off.
package pid1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/guest/agentd"
)

// Contract with the host (vm/README.md).
const (
	WorkspaceSerial = "sbx-workspace"
	RootSerial      = "sbx-root"
	AgentPort       = "sbx.agent"
	Workspace       = "/workspace"
	// InstalledPath is where the init binds itself (read-only) inside an
	// image root, for `sbx hook` and the like.
	InstalledPath = "/usr/local/bin/sbx"
	hostname      = "sbx"
	newRoot       = "/newroot"
)

// IsInit reports whether this process was started by the kernel as a box's
// init: PID 1 run as /init. The name check keeps a gateway that happens to be
// PID 1 (a container without an init) from turning into a guest.
func IsInit() bool { return os.Getpid() == 1 && isInitName(os.Args) }

func isInitName(args []string) bool { return len(args) > 0 && args[0] == "/init" }

// Main runs the guest init. It only returns if powering off failed.
func Main() int {
	// First, before anything can fail: a Go fatal error is written by the
	// runtime straight to fd 2, which is /dev/null when the kernel could
	// not open a console for init.
	wait := consoleWait
	if mods, _ := os.ReadDir("/lib/modules"); len(mods) > 0 {
		wait = 0 // the stock kernel: no hvc0 before virtio_console is loaded
	}
	console, waited := attachConsole(wait)
	log := slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	err := run(ctx, console, waited, &log) // returns only on a fatal error
	log.Error("sbx init: fatal", "err", err)
	fmt.Fprintf(console, "sbx init: fatal: %v\n", err)
	powerOff(log)
	return 1
}

// consoleWait bounds how long init waits for the console before anything
// else.
const consoleWait = 3 * time.Second

// Console device numbers (devices.txt: 5,1 is /dev/console).
const consoleMajor, consoleMinor = 5, 1

// attachConsole makes /dev/console init's stdout and stderr and returns it
// as the log's writer. The kernel opens /dev/console for init only if a
// console exists when init starts, but hvc0 is a virtio-serial port that
// the device announces asynchronously (and the stock kernel only has it
// after loading virtio_console): under load init often starts first, with
// fds 0-2 on /dev/null. So wait a little for it: an init that then dies
// says why on the console instead of vanishing without a word. After
// consoleWait it goes on without one and attaches it when it shows up.
func attachConsole(wait time.Duration) (io.Writer, time.Duration) {
	start := time.Now()
	c := &lateConsole{}
	for {
		f, err := openConsole()
		if err == nil {
			c.set(f)
			return c, time.Since(start)
		}
		if time.Since(start) > wait {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	go func() {
		for range 6000 { // 30 s: longer than any boot
			time.Sleep(5 * time.Millisecond)
			if c.attached() {
				return
			}
			if f, err := openConsole(); err == nil {
				c.set(f)
				return
			}
		}
	}()
	return c, time.Since(start)
}

// openConsole opens /dev/console (creating the node when neither the
// initramfs nor devtmpfs has it) and puts it on fds 0-2 where those are
// the runtime's /dev/null stand-ins or closed.
func openConsole() (*os.File, error) {
	const dev = "/dev/console"
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_NOCTTY, 0)
	if errors.Is(err, os.ErrNotExist) {
		_ = os.MkdirAll("/dev", 0o755)
		if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(consoleMajor, consoleMinor))); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("mknod %s: %w", dev, err)
		}
		f, err = os.OpenFile(dev, os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dev, err)
	}
	for fd := 0; fd <= 2; fd++ {
		if replaceableFD(fd) {
			_ = unix.Dup3(int(f.Fd()), fd, 0)
		}
	}
	return f, nil
}

// replaceableFD reports whether fd is closed or /dev/null (what the Go
// runtime opens for a closed standard fd at start). /proc may not be
// mounted yet, so compare device numbers instead of reading links.
func replaceableFD(fd int) bool {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return true
	}
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
}

// lateConsole is a writer whose file may arrive after the first writes.
type lateConsole struct {
	mu sync.Mutex
	f  *os.File
}

func (c *lateConsole) set(f *os.File) {
	c.mu.Lock()
	c.f = f
	c.mu.Unlock()
}

func (c *lateConsole) attached() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f != nil
}

func (c *lateConsole) Write(p []byte) (int, error) {
	c.mu.Lock()
	f := c.f
	c.mu.Unlock()
	if f == nil {
		return len(p), nil
	}
	return f.Write(p)
}

// Cmdline is what the init reads from the kernel command line.
type Cmdline struct {
	Debug   bool
	Modules []string
	Net     bool // sbx.net=1: the box has its egress network device
}

// ParseCmdline reads the sbx.* keys; anything else is ignored.
func ParseCmdline(s string) Cmdline {
	var c Cmdline
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "sbx.debug":
			c.Debug = v == "" || v == "1" || v == "true"
		case "sbx.net":
			c.Net = v == "1"
		case "sbx.modules":
			for _, m := range strings.Split(v, ",") {
				if m = strings.TrimSpace(m); m != "" {
					c.Modules = append(c.Modules, m)
				}
			}
		}
	}
	return c
}

func run(ctx context.Context, console io.Writer, consoleWaited time.Duration, logp **slog.Logger) error {
	start := time.Now()
	if err := mountBasics(); err != nil {
		return err
	}
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("read /proc/cmdline: %w", err)
	}
	cmd := ParseCmdline(string(raw))
	log := newLogger(console, cmd.Debug)
	*logp = log

	if err := loadModules(log, "/lib/modules", cmd.Modules); err != nil {
		return err
	}
	if len(cmd.Modules) > 0 {
		if lc, ok := console.(*lateConsole); ok && !lc.attached() {
			if f, err := openConsole(); err == nil { // hvc0 exists now
				lc.set(f)
			}
		}
	}
	disks, err := findDisks(2*time.Second, WorkspaceSerial)
	if err != nil {
		return err
	}
	log.Debug("disks", "found", disks)
	if dev, ok := disks[WorkspaceSerial]; ok {
		if err := mountDisk(dev, Workspace); err != nil {
			return err
		}
	} else {
		log.Warn("no sbx-workspace disk: /workspace is a tmpfs")
		if err := unix.Mount("tmpfs", Workspace, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", Workspace, err)
		}
	}
	if dev, ok := disks[RootSerial]; ok {
		if err := switchRoot(log, dev); err != nil {
			return err
		}
	}
	if err := ProvisionAgentUser("/", Workspace); err != nil {
		return err
	}
	if err := harden(log); err != nil {
		return err
	}
	if err := StartHookBroker(ctx, Workspace, log); err != nil {
		return err
	}
	if err := loopbackUp(); err != nil {
		log.Warn("bring up lo", "err", err)
	}
	if cmd.Net {
		// Asked for by the host: a box that should have its egress path
		// but cannot configure it fails loudly rather than run without.
		nic, err := setupNet(2 * time.Second)
		if err != nil {
			return err
		}
		if err := writeNetFiles("/"); err != nil {
			return err
		}
		log.Debug("network up", "nic", nic, "ip", GuestIP, "gateway", GatewayIP)
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		log.Warn("set hostname", "err", err)
	}
	port, err := findPort(10*time.Second, AgentPort)
	if err != nil {
		return err
	}
	log.Info("sbx init ready", "port", port, "took", time.Since(start).Round(time.Millisecond), "console_wait", consoleWaited.Round(time.Millisecond))

	reaper := agentd.NewChildReaper(ctx, log)
	opener := agentd.PortOpenerFunc(func(context.Context) (io.ReadWriteCloser, error) {
		return os.OpenFile(port, os.O_RDWR, 0)
	})
	err = agentd.Serve(ctx, opener, agentd.ServerOptions{
		Root:   Workspace,
		Logger: log,
		Reaper: reaper,
		Shutdown: func(context.Context) error {
			go func() {
				time.Sleep(100 * time.Millisecond) // let the reply reach the host
				powerOff(log)
			}()
			return nil
		},
	})
	return fmt.Errorf("agent stopped: %w", err)
}

// newLogger logs to the console with sbx.debug=1, else warnings and worse
// to the kernel log.
func newLogger(console io.Writer, debug bool) *slog.Logger {
	if debug {
		return slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w := console
	if f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		w = &kmsg{f: f}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// kmsg writes each log record as one kernel log line.
type kmsg struct{ f *os.File }

func (k *kmsg) Write(p []byte) (int, error) {
	if _, err := k.f.Write(append([]byte("sbx: "), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

type mount struct {
	src, dst, fstype string
	flags            uintptr
	data             string
}

func mountBasics() error {
	const nosuid = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, m := range []mount{
		{"proc", "/proc", "proc", nosuid, ""},
		{"sysfs", "/sys", "sysfs", nosuid, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", m.dst, err)
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	// /dev/ptmx must be the devpts one for creack/pty in a fresh devtmpfs.
	if _, err := os.Lstat("/dev/ptmx"); err != nil {
		_ = os.Symlink("pts/ptmx", "/dev/ptmx")
	}
	for _, l := range [][2]string{{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"}, {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}} {
		_ = os.Symlink(l[0], l[1])
	}
	return nil
}

// loadModules loads each named module from dir, in order. A module that is
// already present (built in, or loaded) is fine.
func loadModules(log *slog.Logger, dir string, mods []string) error {
	for _, m := range mods {
		name := filepath.Base(m)
		if !strings.HasSuffix(name, ".ko") {
			name += ".ko"
		}
		p := filepath.Join(dir, name)
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("load module %s: %w", m, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && err != unix.EEXIST {
			return fmt.Errorf("load module %s: %w", p, err)
		}
		log.Debug("module loaded", "name", name)
	}
	return nil
}

// findDisks maps virtio-blk serials to device nodes. Disks probe
// asynchronously after their driver loads, so it waits up to wait for the
// serial want to show up.
func findDisks(wait time.Duration, want string) (map[string]string, error) {
	deadline := time.Now().Add(wait)
	for {
		disks := map[string]string{}
		paths, _ := filepath.Glob("/sys/block/vd*/serial")
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			serial := strings.TrimSpace(string(b))
			disks[serial] = "/dev/" + filepath.Base(filepath.Dir(p))
		}
		if _, ok := disks[want]; ok || time.Now().After(deadline) {
			return disks, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mountDisk(dev, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	var err error
	for range 200 { // the node may lag the sysfs entry by a moment
		if err = unix.Mount(dev, dir, "ext4", unix.MS_NOATIME, ""); err != unix.ENOENT && err != unix.ENXIO {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("mount %s (ext4) on %s: %w", dev, dir, err)
	}
	return nil
}

// switchRoot mounts the image root, moves the live mounts into it, binds
// this binary at InstalledPath there, frees the initramfs and makes the image
// the root. rootfs cannot be pivot_root'ed, so this is the switch_root dance:
// MS_MOVE onto / and chroot. PID 1 stays this process.
func switchRoot(log *slog.Logger, dev string) error {
	if err := mountDisk(dev, newRoot); err != nil {
		return err
	}
	if err := bindSelf(newRoot + InstalledPath); err != nil { // needs /proc
		return err
	}
	for _, m := range []string{Workspace, "/dev", "/proc", "/sys", "/run", "/tmp"} {
		dst := newRoot + m
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("switch root: mkdir %s: %w", dst, err)
		}
		if err := unix.Mount(m, dst, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("switch root: move %s: %w", m, err)
		}
	}
	// Free the initramfs copies of files the image root does not use; the
	// running binary stays (mapped by PID 1 and bound at InstalledPath).
	for _, p := range []string{"/bin/busybox"} {
		_ = os.Remove(p)
	}
	if mods, _ := filepath.Glob("/lib/modules/*.ko"); len(mods) > 0 {
		for _, m := range mods {
			_ = os.Remove(m)
		}
	}
	if err := os.Chdir(newRoot); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("switch root: move %s to /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switch root: chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	log.Debug("switched root", "dev", dev)
	return nil
}

// bindSelf makes dst the running binary: a read-only bind mount of it
// over a placeholder file. Copying it instead wrote the whole binary (25 MB
// for sbx) into the box's disk and fsynced it on every boot, and the copy
// could not save memory: PID 1 keeps the initramfs file mapped for good.
func bindSelf(dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("install self: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		return fmt.Errorf("install self: placeholder %s: %w", dst, err)
	}
	f.Close()
	if err := unix.Mount("/proc/self/exe", dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("install self: bind onto %s: %w", dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("install self: read-only %s: %w", dst, err)
	}
	return nil
}

// loopbackUp sets lo up; the kernel then gives it 127.0.0.1/8 and ::1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return ifUp(fd, "lo")
}

// findPort returns the device node of the virtio-serial port named name,
// waiting up to wait for it to appear.
func findPort(wait time.Duration, name string) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		paths, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err == nil && strings.TrimSpace(string(b)) == name {
				dev := "/dev/" + filepath.Base(filepath.Dir(p))
				if _, err := os.Stat(dev); err == nil {
					return dev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("virtio-serial port %q not found under /sys/class/virtio-ports after %s (is virtio_console loaded?)", name, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// powerOff ends the box: stop every process, flush and detach the disks,
// then power off (or, without ACPI, reboot — QEMU runs with -no-reboot).
func powerOff(log *slog.Logger) {
	_ = unix.Kill(-1, unix.SIGTERM)
	time.Sleep(100 * time.Millisecond)
	_ = unix.Kill(-1, unix.SIGKILL)
	unix.Sync()
	// Killed processes release their files a moment after the signal:
	// retry the unmount briefly, then settle for read-only.
	for _, m := range []string{Workspace} {
		var err error
		for range 50 {
			if err = unix.Unmount(m, 0); err != unix.EBUSY {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			_ = unix.Mount("", m, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
		}
	}
	_ = unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if _, err := os.Stat("/sys/firmware/acpi"); errors.Is(err, os.ErrNotExist) {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	if err := unix.Reboot(cmd); err != nil {
		log.Error("power off", "err", err)
	}
	// Never return from PID 1: the kernel would panic.
	select {}
}
