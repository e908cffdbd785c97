package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// The guest prints these on its console; the boot tests look for them.
const (
	markerUp   = "SBX-USERSPACE-OK"
	markerBlk  = "SBX-BLK:"
	markerPort = "SBX-PORT:"
)

// bootInit is /init of the test initramfs: load the stock kernel's modules
// (the small kernel has none), print a marker on hvc0, report the virtio-blk disk
// serials and the virtio-serial port names, then reboot (with reboot=t and
// -no-reboot QEMU exits).
const bootInit = `#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
for m in $($B cat /modules.order 2>/dev/null); do
	$B insmod /lib/modules/$m 2>>/insmod.err || F="$F $m"
done
# The stock kernel's hvc0 appears only with virtio_console loaded.
exec >/dev/hvc0 2>&1
[ -n "$F" ] && echo "SBX-INSMOD-FAILED:$F $($B cat /insmod.err)"
echo ` + markerUp + `
for s in /sys/block/vd*/serial; do echo "` + markerBlk + ` $($B cat $s)"; done
for p in /sys/class/virtio-ports/*/name; do echo "` + markerPort + ` $($B cat $p)"; done
$B sleep 0.1 # timer interrupts work
echo SBX-SLEPT
$B reboot -f
`

// bootResult is what one test boot showed.
type bootResult struct {
	console  string
	toMarker time.Duration // QEMU start to the userspace marker
}

// buildInitramfs writes a cpio with busybox-static as the shell, bootInit as
// /init and the given modules under /lib/modules/ (in load order).
func buildInitramfs(t testing.TB, modules []string) string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		busybox = "/bin/busybox"
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatalf("busybox-static is needed for the boot test (apt-get install busybox-static): %v", err)
	}
	var c cpio
	for _, d := range []string{"bin", "dev", "proc", "sys", "lib", "lib/modules"} {
		c.dir(d)
	}
	c.charDev("dev/console", 5, 1)
	c.file("bin/busybox", 0o755, bb)
	c.file("init", 0o755, []byte(bootInit))
	var order []string
	for _, m := range modules {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		c.file("lib/modules/"+filepath.Base(m), 0o644, b)
		order = append(order, filepath.Base(m))
	}
	c.file("modules.order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	path := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := os.WriteFile(path, c.bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bootArgs is the QEMU command line for a test boot, with the flags
// DESIGN.md measured on these machines (TCG, microvm, tsc_early_khz, reboot=t).
func bootArgs(k Kernel, initrd, disk string) []string {
	// pic=on: with pic=off this kernel gets no timer interrupt through the
	// IO-APIC (a guest `sleep 1` never returns, reboot() hangs).
	mach := "microvm,x-option-roms=off,pit=on,pic=on,isa-serial=off,rtc=on,acpi=off"
	appendLine := []string{"console=hvc0", "quiet", "reboot=t", "panic=-1", "nolapic_timer"}
	if k.Kind == KindStock {
		// virtio_mmio is a module here: it finds the devices through ACPI,
		// since module parameters on the command line are not applied by insmod.
		mach = "microvm,x-option-roms=off,isa-serial=off,rtc=on"
		appendLine = []string{"console=hvc0", "quiet", "reboot=t", "panic=-1"}
	}
	if khz := hostKHz(); khz > 0 {
		appendLine = append(appendLine, "tsc_early_khz="+strconv.Itoa(khz))
	}
	return []string{
		"-M", mach, "-accel", "tcg", "-m", "256M", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", k.Path, "-initrd", initrd, "-append", strings.Join(appendLine, " "),
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "stdio,id=con,signal=off",
		"-device", "virtconsole,chardev=con",
		"-chardev", "null,id=agent",
		"-device", "virtserialport,chardev=agent,name=sbx.agent",
		"-drive", "id=ws,if=none,format=raw,file=" + disk,
		"-device", "virtio-blk-device,drive=ws,serial=sbx-workspace",
	}
}

// hostKHz reads the host CPU clock; TCG guests hang calibrating the TSC
// in some boots without tsc_early_khz.
func hostKHz() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

// boot runs one guest to completion and returns its console output.
func boot(t testing.TB, k Kernel, initrd string) bootResult {
	t.Helper()
	testutil.SkipShort(t, "boots a QEMU VM")
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("qemu-system-x86_64 not found (apt-get install qemu-system-x86): %v", err)
	}
	disk := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, bootArgs(k, initrd, disk)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	var res bootResult
	var console strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if res.toMarker == 0 && strings.Contains(line, markerUp) {
			res.toMarker = time.Since(start)
		}
		console.WriteString(line + "\n")
	}
	err = cmd.Wait()
	res.console = console.String()
	if ctx.Err() != nil {
		t.Fatalf("%s kernel: guest did not power off within 90 s; console:\n%s", k.Kind, res.console)
	}
	if err != nil {
		t.Fatalf("%s kernel: qemu: %v\nstderr: %s\nconsole:\n%s", k.Kind, err, stderr.String(), res.console)
	}
	return res
}

// checkBoot asserts the guest reached userspace and saw its devices.
func checkBoot(t *testing.T, k Kernel, res bootResult) {
	t.Helper()
	for _, want := range []string{markerUp, markerBlk + " sbx-workspace", markerPort + " sbx.agent", "SBX-SLEPT"} {
		if !strings.Contains(res.console, want) {
			t.Errorf("%s kernel: console lacks %q:\n%s", k.Kind, want, res.console)
		}
	}
	if strings.Contains(res.console, "SBX-INSMOD-FAILED") {
		t.Errorf("%s kernel: a module failed to load:\n%s", k.Kind, res.console)
	}
	t.Logf("%s kernel %s: userspace marker after %v", k.Kind, k.Release, res.toMarker.Round(time.Millisecond))
}

func TestBootStock(t *testing.T) {
	testutil.SkipShort(t, "boots the stock kernel in QEMU") // before Stock copies it out
	k, err := Stock(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkBoot(t, k, boot(t, k, buildInitramfs(t, k.Modules)))
}

func TestBootSmall(t *testing.T) {
	k, err := Small(projectDataDir(t))
	if err != nil {
		t.Skipf("small kernel not built (run `go tool -modfile=tools/go.mod task kernel`): %v", err)
	}
	checkBoot(t, k, boot(t, k, buildInitramfs(t, nil)))
}

// BenchmarkBoot measures QEMU start to the userspace marker for each kernel
// kind that exists (reported as ms-to-userspace, median over b.N boots).
func BenchmarkBoot(b *testing.B) {
	kernels := map[Kind]func() (Kernel, error){
		KindStock: func() (Kernel, error) { return Stock(b.TempDir()) },
		KindSmall: func() (Kernel, error) { return Small(projectDataDir(b)) },
	}
	for _, kind := range []Kind{KindSmall, KindStock} {
		b.Run(string(kind), func(b *testing.B) {
			k, err := kernels[kind]()
			if err != nil {
				b.Skipf("%s kernel unavailable: %v", kind, err)
			}
			initrd := buildInitramfs(b, k.Modules)
			var marks []time.Duration
			b.ResetTimer()
			for b.Loop() {
				res := boot(b, k, initrd)
				if res.toMarker == 0 {
					b.Fatalf("no userspace marker:\n%s", res.console)
				}
				marks = append(marks, res.toMarker)
			}
			slices.Sort(marks)
			b.ReportMetric(float64(marks[len(marks)/2])/float64(time.Millisecond), "ms-to-userspace")
		})
	}
}

// projectDataDir is where `go tool -modfile=tools/go.mod task kernel` installs: $SBX_DATA (relative
// to the module root), else .sbx at the module root.
func projectDataDir(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			// The tasks run at the module root, so a relative SBX_DATA is
			// relative to it, not to the test's package directory.
			if d := os.Getenv("SBX_DATA"); d != "" {
				if filepath.IsAbs(d) {
					return d
				}
				return filepath.Join(dir, d)
			}
			return filepath.Join(dir, ".sbx")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

// cpio builds a "newc" archive, the format the kernel unpacks as initramfs.
type cpio struct {
	buf bytes.Buffer
	ino int
}

func (c *cpio) entry(name string, mode uint32, data []byte, rmajor, rminor int) {
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	fmt.Fprintf(&c.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.buf.WriteString(name)
	c.buf.WriteByte(0)
	c.pad()
	c.buf.Write(data)
	c.pad()
}

func (c *cpio) pad() {
	for c.buf.Len()%4 != 0 {
		c.buf.WriteByte(0)
	}
}

func (c *cpio) dir(name string)                         { c.entry(name, 0o040755, nil, 0, 0) }
func (c *cpio) file(name string, perm uint32, b []byte) { c.entry(name, 0o100000|perm, b, 0, 0) }
func (c *cpio) charDev(name string, major, minor int)   { c.entry(name, 0o020600, nil, major, minor) }
func (c *cpio) bytes() []byte                           { c.entry("TRAILER!!!", 0, nil, 0, 0); return c.buf.Bytes() }
