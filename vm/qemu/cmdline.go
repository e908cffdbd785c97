package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/fwd"
	"sbx.dev/sbx/vm/kernel"
)

// File names inside a box directory (see vm/README.md).
const (
	recordFile    = "box.json"
	qmpSock       = "qmp.sock"
	agentSock     = "agent.sock"
	workspaceFile = "workspace.ext4"
	rootFile      = "root.qcow2"
	snapFile      = "mem.snap"
	ramFile       = "mem.ram"
	logFile       = "qemu.log"
	consoleFile   = "console.log"
)

// machine is everything one QEMU command line depends on.
type machine struct {
	QEMU      string
	Accel     string // "kvm" or "tcg"
	Kernel    kernel.Kernel
	Initramfs string
	Dir       string // the box directory
	SockDir   string // where qmp.sock and agent.sock live (usually Dir)
	Name      string
	MemoryMiB int
	VCPUs     int
	Root      bool // attach root.qcow2 as sbx-root
	// RAMFile backs guest memory with a shared file, so a snapshot only
	// saves device state (x-ignore-shared) and a wake maps the memory back
	// instead of copying it. Empty: anonymous memory.
	RAMFile  string
	Incoming bool // start waiting for a restore (-incoming defer)
	// FreePageReporting adds a virtio balloon that only takes the pages
	// the guest reports free, so memory a guest touched once (the unpacked
	// initramfs, freed caches) goes back to the host. Needs a kernel with
	// CONFIG_VIRTIO_BALLOON=y and CONFIG_PAGE_REPORTING=y.
	FreePageReporting bool
	HostKHz           int
	Debug             bool // guest console to console.log, sbx.debug=1
	// Egress is the box's gateway socket (vm.Spec.Egress); "" = no network
	// device. Forwarder is the program QEMU runs per guest connection to
	// vm.EgressAddr, as `Forwarder vm-fwd Egress`.
	Egress    string `json:",omitempty"`
	Forwarder string `json:",omitempty"`
}

// args returns the QEMU arguments (without argv[0]). The devices are the
// fewest that work: no PCI, no serial, no display; virtio-mmio for the agent
// port and the disks; a network device only for a box with an egress socket.
func (m machine) args() []string {
	mach := "microvm,x-option-roms=off,rtc=on"
	// no_timer_check: on a busy host the kernel's IO-APIC timer check
	// under TCG misses its ticks and the guest dies before its console
	// is up (measured: 2 of 20 parallel boots without it, 0 of 60 with).
	appendLine := []string{"quiet", "reboot=t", "panic=-1", "no_timer_check"}
	if m.Kernel.Kind == kernel.KindSmall {
		// No ACPI boots fastest; rtc=off costs ~1 s. pic=off would save a
		// little more, but a VM restored from a snapshot then never gets
		// another timer interrupt (measured: the guest halts for good).
		mach = "microvm,x-option-roms=off,pit=on,pic=on,isa-serial=off,rtc=on,acpi=off"
		// initramfs_async=0: this kernel has one CPU, so unpacking the
		// initramfs beside the initcalls only interleaves them; unpacked
		// first, /init runs ~45 ms sooner (median of 4 traced boots: 0.51
		// -> 0.46 s to "Run /init").
		appendLine = append(appendLine, "nolapic_timer", "initramfs_async=0")
	} else {
		// The stock kernel needs ACPI to find the virtio-mmio devices.
		mach += ",isa-serial=off"
		if len(m.Kernel.Modules) > 0 {
			names := make([]string, len(m.Kernel.Modules))
			for i, p := range m.Kernel.Modules {
				names[i] = filepath.Base(p)
			}
			appendLine = append(appendLine, "sbx.modules="+strings.Join(names, ","))
		}
	}
	if m.HostKHz > 0 {
		// Without it 2–4 TCG boots in 10 hang calibrating the TSC.
		appendLine = append(appendLine, fmt.Sprintf("tsc_early_khz=%d", m.HostKHz))
	}
	// The console goes to console.log: with "quiet" only errors and
	// panics, which then explain a box that died.
	appendLine = append(appendLine, "console=hvc0")
	if m.Debug {
		appendLine = append(appendLine, "sbx.debug=1")
	}
	// seccomp: a guest that breaks into QEMU meets a filter and cannot
	// start programs (snapshot files are passed in as descriptors). A box
	// with egress is the exception, see egressSandbox.
	sandbox := "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
	if m.Egress != "" {
		sandbox = egressSandbox
		// The init waits for the network device and configures it.
		appendLine = append(appendLine, "sbx.net=1")
	}
	if m.RAMFile != "" {
		mach += ",memory-backend=ram"
	}
	vcpus := max(m.VCPUs, 1)
	a := []string{
		"-name", "sbx/" + m.Name,
		"-M", mach,
		"-accel", accelArg(m.Accel),
		"-m", fmt.Sprintf("%dM", m.MemoryMiB),
		"-smp", fmt.Sprint(vcpus),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-sandbox", sandbox,
		"-kernel", m.Kernel.Path,
		"-append", strings.Join(appendLine, " "),
		"-qmp", "unix:" + filepath.Join(m.SockDir, qmpSock) + ",server=on,wait=off",
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=agent,path=" + filepath.Join(m.SockDir, agentSock) + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=sbx.agent",
		"-drive", "id=ws,if=none,format=raw,aio=threads,file=" + filepath.Join(m.Dir, workspaceFile),
		"-device", "virtio-blk-device,drive=ws,serial=sbx-workspace",
	}
	a = append(a, "-cpu", cpuModel(m.Accel))
	if m.Initramfs != "" {
		a = append(a, "-initrd", m.Initramfs)
	}
	a = append(a,
		"-chardev", "file,id=con,path="+filepath.Join(m.Dir, consoleFile),
		"-device", "virtconsole,chardev=con")
	if m.Root {
		a = append(a,
			"-drive", "id=root,if=none,format=qcow2,aio=threads,file="+filepath.Join(m.Dir, rootFile),
			"-device", "virtio-blk-device,drive=root,serial=sbx-root")
	}
	if m.Egress != "" {
		a = append(a, "-netdev", egressNetdev(m.Forwarder, m.Egress),
			"-device", "virtio-net-device,netdev=egress")
	}
	if m.FreePageReporting {
		a = append(a, "-device", "virtio-balloon-device,free-page-reporting=on")
	}
	if m.RAMFile != "" {
		a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,mem-path=%s,share=on", m.MemoryMiB, m.RAMFile))
	}
	if m.Incoming {
		a = append(a, "-incoming", "defer")
	}
	return a
}

// egressSandbox is the seccomp filter of a box with egress: slirp's
// guestfwd=…-cmd: spawns the forwarder for each guest connection, and the
// spawned child calls setsid() first, which elevateprivileges=deny answers
// by killing it (measured on QEMU 7.2: the guest's connection is reset and
// the forwarder never runs). So both are allowed there, and only there;
// libseccomp sets no_new_privs with the filter, so nothing QEMU starts can
// gain privileges through a setuid binary, and the forwarder inherits the
// rest of the filter.
const egressSandbox = "on,obsolete=deny,elevateprivileges=allow,spawn=allow,resourcecontrol=deny"

// egressNetdev is the box's one network path: user-mode networking with
// restrict=on (no route to the host, the internet or slirp's DNS) and one
// guestfwd that hands every TCP connection to vm.EgressAddr to a fresh
// forwarder process (cmd:, not tcp:, which would open a single host
// connection at start and serve one guest connection). Both paths passed
// vm.ValidEgress, so neither holds a comma (the option separator) nor
// anything slirp's shell-style splitting of the command would interpret.
func egressNetdev(forwarder, socket string) string {
	return fmt.Sprintf("user,id=egress,restrict=on,ipv6=off,guestfwd=tcp:%s-cmd:%s %s %s",
		vm.EgressAddr, forwarder, fwd.Command, socket)
}

// reportsFreePages tells from the small kernel's build config (the
// "config" file beside its vmlinux) whether it can report free pages.
func reportsFreePages(k kernel.Kernel) bool {
	if k.Kind != kernel.KindSmall {
		return false // the stock kernel has the balloon only as a module
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(k.Path), "config"))
	if err != nil {
		return false
	}
	cfg := string(b)
	return strings.Contains(cfg, "\nCONFIG_VIRTIO_BALLOON=y\n") && strings.Contains(cfg, "\nCONFIG_PAGE_REPORTING=y\n")
}

// cpuModel is the guest CPU. Under TCG QEMU's default (qemu64) lacks AVX2
// and friends, and Claude Code, a native binary, dies of SIGILL on it; "max"
// is every feature TCG emulates. Measured on QEMU 7.2 with both kernels
// (small: pic=on, stock: ACPI): boots as reliably as qemu64 and no slower
// (median of 8 serial boots to first agent reply within noise: 1.12 s
// qemu64, 1.06 s max). Without ERMS/FSRM the guest kernel copies to and
// from user space with plain moves instead of "rep movsb", which TCG runs
// slowly: file copy out 130 MB/s with plain max, 257 with these off, 274
// with qemu64 (bench-vm, n=10).
func cpuModel(accel string) string {
	if accel == "kvm" {
		return "host"
	}
	return "max,erms=off,fsrm=off"
}

// accelArg caps TCG's translation cache: its 1 GiB default fills up over
// a box's life and would count as the box's private memory.
func accelArg(accel string) string {
	if accel == "tcg" {
		return "tcg,tb-size=" + fmt.Sprint(tcgCacheMiB)
	}
	return accel
}

// tcgCacheMiB is the TCG translation cache per box.
const tcgCacheMiB = 32
