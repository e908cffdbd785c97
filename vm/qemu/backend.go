// Package qemu is the vm.Backend that runs each box as a QEMU microvm on the
// local host: one QEMU process per box in its own session, its QMP and agent
// sockets and disks under <data>/boxes/<name>/ (see vm/README.md).
//
// Beyond the README's layout a box directory holds mem.ram (guest memory in
// a shared file, so a sleep snapshot is only device state and a wake maps
// the memory back) and console.log (the guest console: errors and panics).
// Socket paths that would pass the 108-byte limit move to
// <data>/run/<hash>/. <data>/accel.json caches the KVM probe verdict and
// <data>/initramfs/ the generated initramfs.
package qemu

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/image"
	"sbx.dev/sbx/vm/initramfs"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/qemu/host"
)

// Config configures the QEMU backend. Zero fields are found or probed.
type Config struct {
	DataDir string
	// Kernel to boot; nil resolves one under DataDir (small, else stock).
	Kernel *kernel.Kernel
	// Initramfs is the guest's initramfs with sbx as /init; "" builds one
	// under <DataDir>/initramfs from Init, busybox and the kernel's modules.
	Initramfs string
	// Init is the static sbx binary for /init; "" means this executable
	// (the gateway is built with CGO_ENABLED=0).
	Init string
	// Forwarder is the program QEMU runs for each connection a box with
	// an egress socket opens, as `Forwarder vm-fwd SOCKET` (see vm/fwd);
	// "" means Init, else this executable: the sbx binary has the hidden
	// vm-fwd command (fwd.NewCommand).
	Forwarder string
	// Accel forces "kvm" or "tcg"; "" probes KVM once and caches the verdict.
	Accel string
	// BuildCache is the machine's build cache (SBX_CACHE, else
	// ~/.cache/sbx): the KVM verdict is shared there, so a new data dir
	// does not probe again. "" keeps it in the data dir only.
	BuildCache string
	// RAMDir is a tmpfs directory for running boxes' guest RAM (see
	// ram.go); "" picks /dev/shm/sbx-<hash> when /dev/shm is a writable
	// tmpfs, "none" keeps the RAM files in the box directories.
	RAMDir string
	Debug  bool // guest console to console.log and sbx.debug=1
	Logger *slog.Logger
}

// Backend runs boxes as local QEMU microvms.
type Backend struct {
	dataDir   string
	qemu      string
	init      string // the static sbx for /init when initramfs is built here
	forwarder string
	accel     host.Verdict
	hostKHz   int

	// bootMu guards boot, the kernel new boots use: it moves from the
	// stock kernel to the small one when that is installed while the
	// gateway runs (`task up` builds it in the background).
	bootMu sync.Mutex
	boot   bootKernel
	// upgrade is set when the backend chose the kernel itself (Config
	// names neither a kernel nor an initramfs) and boots the stock one.
	upgrade    bool
	saidStock  bool
	saidBroken bool
	// smp is the kernel of boxes with more than one vCPU when boot's
	// kernel is built without SMP (the small one): the stock kernel,
	// prepared on the first such box (smpkernel.go).
	smp *bootKernel

	ramDir string     // "" = guest RAM in the box directories
	ramMu  sync.Mutex // creating and removing files in ramDir, and ramDir itself
	debug  bool
	log    *slog.Logger

	mu    sync.Mutex
	boxes map[string]*box
}

var (
	_ vm.Backend   = (*Backend)(nil)
	_ vm.BootNoter = (*Backend)(nil)
)

// box is the backend's view of one box.
type box struct {
	dir  string
	rec  record
	proc *proc // nil when no QEMU runs

	lastTicks  uint64
	lastSample time.Time
}

// record is box.json: the manager's Box plus what this backend needs to
// re-adopt the machine or restore its snapshot.
type record struct {
	Box     vm.Box  `json:"box"`
	PID     int     `json:"pid,omitempty"`
	SockDir string  `json:"sock_dir"`
	Root    string  `json:"root_image,omitempty"` // base image of root.qcow2
	Machine machine `json:"machine"`              // the last command line's inputs
}

// New prepares the backend: finds QEMU and the kernel and settles the
// accelerator.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("qemu backend: no data dir")
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("qemu backend: data dir %q: %w", cfg.DataDir, err)
	}
	qemuBin, err := host.FindQEMU()
	if err != nil {
		return nil, err
	}
	var k kernel.Kernel
	if cfg.Kernel != nil {
		k = *cfg.Kernel
	} else if k, err = kernel.Resolve(dataDir); err != nil {
		return nil, err
	}
	upgrade := cfg.Kernel == nil && cfg.Initramfs == "" && k.Kind == kernel.KindStock
	fwdProg := cfg.Forwarder
	if fwdProg == "" {
		fwdProg = cfg.Init
	}
	if fwdProg == "" {
		if fwdProg, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("qemu backend: find the sbx binary for vm-fwd: %w", err)
		}
	}
	imageInitramfs := cfg.Initramfs
	if cfg.Initramfs == "" {
		if cfg.Initramfs, imageInitramfs, err = buildInitramfs(ctx, dataDir, cfg.Init, k); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(cfg.Initramfs); err != nil {
		return nil, fmt.Errorf("qemu backend: initramfs: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dataDir, "boxes"), 0o700); err != nil {
		return nil, fmt.Errorf("qemu backend: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Backend{
		dataDir: dataDir, qemu: qemuBin, init: cfg.Init, forwarder: fwdProg, upgrade: upgrade,
		boot:    bootKernel{Kernel: k, Initramfs: cfg.Initramfs, ImageInitramfs: imageInitramfs, FreePages: reportsFreePages(k)},
		hostKHz: host.CPUKHz(), debug: cfg.Debug, log: log, boxes: map[string]*box{},
	}
	switch cfg.RAMDir {
	case "":
		b.ramDir, _ = host.RAMDir(dataDir)
	case "none":
	default:
		if b.ramDir, err = filepath.Abs(cfg.RAMDir); err != nil {
			return nil, fmt.Errorf("qemu backend: RAM dir %q: %w", cfg.RAMDir, err)
		}
	}
	switch cfg.Accel {
	case "kvm", "tcg":
		b.accel = host.Verdict{Accel: cfg.Accel, Why: "set by configuration"}
	case "":
		if b.accel, err = host.ChooseAccel(ctx, host.ProbeConfig{QEMU: qemuBin, Kernel: k.Path, Release: k.Release,
			Cache: filepath.Join(dataDir, "accel.json"), Shared: host.SharedVerdict(cfg.BuildCache), Log: log}); err != nil {
			return nil, fmt.Errorf("qemu backend: %w", err)
		}
	default:
		return nil, fmt.Errorf("qemu backend: accel %q: want kvm, tcg or empty", cfg.Accel)
	}
	log.Info("qemu backend ready", "qemu", qemuBin, "kernel", k.Kind, "kernel_path", k.Path,
		"accel", b.accel.Accel, "why", b.accel.Why, "ram_dir", b.ramDir)
	return b, nil
}

// buildInitramfs generates the initramfs for kernel k (content-addressed,
// so an unchanged one is reused).
//
// It builds two: one with busybox (the only shell of a box without an
// image root) and one without it for boxes that pivot into an image, which
// has its own: every MB of initramfs is ~8 ms of every boot under TCG
// (populate_rootfs), and busybox is 2 MB.
func buildInitramfs(ctx context.Context, dataDir, init string, k kernel.Kernel) (plain, image string, err error) {
	if init == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", "", fmt.Errorf("qemu backend: find the sbx binary for /init: %w", err)
		}
		init = exe
	}
	if err := checkStatic(init); err != nil {
		return "", "", fmt.Errorf("qemu backend: %s cannot be a box's /init: %w (build sbx with CGO_ENABLED=0)", init, err)
	}
	opts := initramfs.Options{Init: init, Modules: k.Modules}
	dir := filepath.Join(dataDir, "initramfs")
	if image, err = initramfs.Build(ctx, dir, opts); err != nil {
		return "", "", fmt.Errorf("qemu backend: build initramfs from %s: %w", init, err)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil || checkStatic(bb) != nil {
		return image, image, nil
	}
	opts.Busybox = bb
	if plain, err = initramfs.Build(ctx, dir, opts); err != nil {
		return "", "", fmt.Errorf("qemu backend: build initramfs from %s: %w", init, err)
	}
	return plain, image, nil
}

// checkStatic fails for a binary that needs a dynamic loader: the
// initramfs has no libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked")
		}
	}
	return nil
}

// Initramfs returns the initramfs boxes without an image root boot.
func (b *Backend) Initramfs() string { return b.bootKernel(context.Background()).Initramfs }

// Accel returns the accelerator in use and why.
func (b *Backend) Accel() host.Verdict { return b.accel }

// Kernel returns the kernel new boxes boot.
func (b *Backend) Kernel() kernel.Kernel { return b.bootKernel(context.Background()).Kernel }

// BootNote says which kernel new boxes boot: "small kernel" or "stock
// kernel" (vm.BootNoter).
func (b *Backend) BootNote() string { return string(b.Kernel().Kind) + " kernel" }

// Dir returns the box's directory (for tests and diagnostics).
func (b *Backend) Dir(name string) string { return filepath.Join(b.dataDir, "boxes", name) }

// PID returns the box's QEMU pid, 0 when none runs.
func (b *Backend) PID(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bx := b.boxes[name]; bx != nil && bx.proc != nil && bx.proc.alive() {
		return bx.proc.pid
	}
	return 0
}

func (b *Backend) get(name string) (*box, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bx := b.boxes[name]
	if bx == nil {
		return nil, fmt.Errorf("box %q: %w", name, vm.ErrNotFound)
	}
	return bx, nil
}

// sockDir picks where the box's sockets live: its own directory, unless the
// path would pass the 108-byte sun_path limit (long names, deep data dirs).
func (b *Backend) sockDir(dir, name string) (string, error) {
	if len(filepath.Join(dir, agentSock)) < 100 {
		return dir, nil
	}
	h := sha256.Sum256([]byte(name))
	alt := filepath.Join(b.dataDir, "run", hex.EncodeToString(h[:8]))
	if len(filepath.Join(alt, agentSock)) >= 100 {
		return "", fmt.Errorf("data dir %s is too deep for unix socket paths (108 bytes)", b.dataDir)
	}
	return alt, nil
}

// Create makes the box directory, its sparse ext4 workspace and, for an
// image, the qcow2 overlay.
func (b *Backend) Create(ctx context.Context, vb vm.Box) error {
	return b.provision(vb, func(bx *box) error {
		if err := makeWorkspace(ctx, filepath.Join(bx.dir, workspaceFile), vb.Spec.WorkspaceMiB); err != nil {
			return err
		}
		if vb.Spec.Image != "" {
			img, err := image.Resolve(b.dataDir, vb.Spec.Image)
			if err != nil {
				return err
			}
			if err := makeOverlay(ctx, filepath.Join(bx.dir, rootFile), img.Path); err != nil {
				return err
			}
			bx.rec.Root = img.Path
		}
		return nil
	})
}

// provision makes box vb's directory and record around the disks that
// disks puts in it (and names in bx.rec); on any failure nothing is left.
func (b *Backend) provision(vb vm.Box, disks func(bx *box) error) error {
	dir := b.Dir(vb.Name)
	b.mu.Lock()
	if b.boxes[vb.Name] != nil {
		b.mu.Unlock()
		return fmt.Errorf("box %q: %w", vb.Name, vm.ErrExists)
	}
	bx := &box{dir: dir}
	b.boxes[vb.Name] = bx
	b.mu.Unlock()
	fail := func(err error) error {
		b.mu.Lock()
		delete(b.boxes, vb.Name)
		b.mu.Unlock()
		os.RemoveAll(dir)
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			b.mu.Lock()
			delete(b.boxes, vb.Name)
			b.mu.Unlock()
			return fmt.Errorf("box %q: directory %s already exists: %w", vb.Name, dir, vm.ErrExists)
		}
		return fail(fmt.Errorf("create box %q: %w", vb.Name, err))
	}
	sd, err := b.sockDir(dir, vb.Name)
	if err != nil {
		return fail(err)
	}
	if sd != dir {
		if err := os.MkdirAll(sd, 0o700); err != nil {
			return fail(fmt.Errorf("create box %q: %w", vb.Name, err))
		}
	}
	bx.rec = record{Box: vb, SockDir: sd}
	if err := disks(bx); err != nil {
		if sd != dir {
			os.RemoveAll(sd)
		}
		return fail(err)
	}
	if err := b.saveLocked(bx); err != nil {
		return fail(err)
	}
	return nil
}

// saveLocked writes box.json atomically. Callers hold no lock on b.mu
// needed; rec is only changed by the box's serialised lifecycle calls.
func (b *Backend) saveLocked(bx *box) error {
	data, err := json.MarshalIndent(bx.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", recordFile, err)
	}
	return host.WriteFileAtomic(filepath.Join(bx.dir, recordFile), append(data, '\n'), 0o600)
}

// Save persists the manager's view of the box.
func (b *Backend) Save(ctx context.Context, vb vm.Box) error {
	bx, err := b.get(vb.Name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	bx.rec.Box = vb
	b.mu.Unlock()
	return b.saveLocked(bx)
}

func (b *Backend) machineFor(ctx context.Context, bx *box) (machine, error) {
	boot, err := b.bootKernelFor(ctx, bx.rec.Box.Spec.VCPUs)
	if err != nil {
		return machine{}, fmt.Errorf("box %q: %w", bx.rec.Box.Name, err)
	}
	initramfs := boot.Initramfs
	if bx.rec.Root != "" {
		initramfs = boot.ImageInitramfs
	}
	return machine{
		QEMU: b.qemu, Accel: b.accel.Accel, Kernel: boot.Kernel, Initramfs: initramfs,
		Dir: bx.dir, SockDir: bx.rec.SockDir, Name: bx.rec.Box.Name,
		MemoryMiB: bx.rec.Box.Spec.MemoryMiB, VCPUs: bx.rec.Box.Spec.VCPUs,
		Root: bx.rec.Root != "", HostKHz: b.hostKHz, Debug: b.debug,
		RAMFile:           b.ramFileFor(bx),
		FreePageReporting: boot.FreePages,
		Egress:            bx.rec.Box.Spec.Egress,
		Forwarder:         b.forwarder,
	}, nil
}

// checkEgress refuses a command line whose egress paths QEMU could misread
// (the manager checked the socket already; the record may be older).
func checkEgress(m machine) error {
	if m.Egress == "" {
		return nil
	}
	if err := vm.ValidEgress(m.Egress); err != nil {
		return err
	}
	if !filepath.IsAbs(m.Forwarder) || strings.ContainsFunc(m.Forwarder, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/_.-+@:=", r))
	}) {
		return fmt.Errorf("forwarder program %q: want an absolute path of A-Z a-z 0-9 / _ . - + @ : = (QEMU splits its command line); set qemu.Config.Forwarder", m.Forwarder)
	}
	return nil
}

// launch starts QEMU for m and records its pid.
func (b *Backend) launch(bx *box, m machine) error {
	if bx.proc != nil && bx.proc.alive() {
		return fmt.Errorf("box %q: %w: its machine is running", bx.rec.Box.Name, vm.ErrState)
	}
	if err := checkEgress(m); err != nil {
		return fmt.Errorf("box %q: %w", bx.rec.Box.Name, err)
	}
	// Stale sockets from an earlier run would make dials hit nothing.
	os.Remove(filepath.Join(m.SockDir, qmpSock))
	os.Remove(filepath.Join(m.SockDir, agentSock))
	p, err := startProc(m.QEMU, m.args(), filepath.Join(bx.dir, logFile))
	if err != nil {
		if b.onTmpfs(m.RAMFile) {
			b.dropTmpRAM(m.RAMFile)
		}
		return err
	}
	b.dropTmpRAMAfter(p, m.RAMFile)
	b.mu.Lock()
	bx.proc = p
	bx.rec.PID = p.pid
	bx.rec.Machine = m
	bx.lastTicks, bx.lastSample = 0, time.Time{}
	b.mu.Unlock()
	if err := b.saveLocked(bx); err != nil {
		p.kill(5 * time.Second)
		return err
	}
	return nil
}

// Start cold-boots the box.
func (b *Backend) Start(ctx context.Context, name string) error {
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	// A cold boot makes any memory snapshot stale, and starts from fresh
	// (sparse) memory.
	os.Remove(filepath.Join(bx.dir, snapFile))
	os.Remove(filepath.Join(bx.dir, ramFile))
	m, err := b.machineFor(ctx, bx)
	if err != nil {
		return err
	}
	return b.launch(bx, m)
}

// dialUnix dials a unix socket QEMU creates at start, retrying until it
// exists or the process ends.
func dialUnix(ctx context.Context, path string, p *proc) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial %s: %w", path, ctx.Err())
		case <-p.done:
			return nil, p.exitErr()
		case <-time.After(time.Millisecond):
		}
	}
}

func (b *Backend) running(name string) (*box, *proc, error) {
	bx, err := b.get(name)
	if err != nil {
		return nil, nil, err
	}
	b.mu.Lock()
	p := bx.proc
	b.mu.Unlock()
	if p == nil || !p.alive() {
		return nil, nil, fmt.Errorf("box %q: %w: no machine running", name, vm.ErrState)
	}
	return bx, p, nil
}

// Connect opens a stream to the box's agent port.
func (b *Backend) Connect(ctx context.Context, name string) (net.Conn, error) {
	bx, p, err := b.running(name)
	if err != nil {
		return nil, err
	}
	return dialUnix(ctx, filepath.Join(bx.rec.SockDir, agentSock), p)
}

func (b *Backend) qmpOf(ctx context.Context, bx *box, p *proc) (*qmp, error) {
	path := filepath.Join(bx.rec.SockDir, qmpSock)
	for {
		c, err := dialUnix(ctx, path, p)
		if err != nil {
			return nil, err
		}
		c.Close()
		q, err := dialQMP(ctx, path)
		if err == nil {
			return q, nil
		}
		if ctx.Err() != nil || !p.alive() {
			return nil, err
		}
	}
}

// Wait blocks until the box's current machine ends.
func (b *Backend) Wait(ctx context.Context, name string) error {
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	p := bx.proc
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		if p.stopping.Load() {
			return nil
		}
		return p.exitErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sleep pauses the machine, saves its memory to mem.snap and ends QEMU.
func (b *Backend) Sleep(ctx context.Context, name string) error {
	bx, p, err := b.running(name)
	if err != nil {
		return err
	}
	q, err := b.qmpOf(ctx, bx, p)
	if err != nil {
		return fmt.Errorf("sleep %q: %w", name, err)
	}
	defer q.Close()
	// Give the guest a moment to see the host's agent connection close
	// (the manager closed it before calling Sleep). A guest frozen while
	// still in the old session would, after the wake, eat the first hello
	// of the new connection as a bad frame and answer only the resent
	// one, 250 ms later.
	time.Sleep(20 * time.Millisecond)
	if _, err := q.run(ctx, "stop", nil); err != nil {
		return fmt.Errorf("sleep %q: %w", name, err)
	}
	snap := filepath.Join(bx.dir, snapFile)
	tmp := snap + ".tmp"
	running := bx.rec.Machine.RAMFile
	if bx.rec.Machine.RAMFile != "" {
		if err := q.ignoreShared(ctx); err != nil {
			q.run(context.WithoutCancel(ctx), "cont", nil)
			return fmt.Errorf("sleep %q: %w", name, err)
		}
	}
	// The file goes to QEMU as a descriptor: QEMU never spawns a shell
	// and runs with spawning denied by its seccomp filter.
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		q.run(context.WithoutCancel(ctx), "cont", nil)
		return fmt.Errorf("sleep %q: %w", name, err)
	}
	err = q.passFD(ctx, "snapshot", out)
	out.Close()
	if err == nil {
		err = q.migrateTo(ctx, "fd:snapshot")
	}
	if err != nil {
		os.Remove(tmp)
		q.run(context.WithoutCancel(ctx), "cont", nil)
		return fmt.Errorf("sleep %q: save memory: %w", name, err)
	}
	if b.onTmpfs(bx.rec.Machine.RAMFile) {
		// The memory must be on disk before the snapshot that needs it is
		// declared good: copy what the guest wrote out of tmpfs. The
		// record then names the copy, which a wake maps.
		onDisk := filepath.Join(bx.dir, ramFile)
		err := copySparse(onDisk, bx.rec.Machine.RAMFile)
		if err == nil {
			b.mu.Lock()
			bx.rec.Machine.RAMFile = onDisk
			b.mu.Unlock()
			err = b.saveLocked(bx)
		}
		if err != nil {
			os.Remove(tmp)
			q.run(context.WithoutCancel(ctx), "cont", nil)
			return fmt.Errorf("sleep %q: %w", name, err)
		}
	} else if bx.rec.Machine.RAMFile != "" {
		// The memory file must be on disk before the snapshot that needs
		// it is declared good.
		if err := syncFile(bx.rec.Machine.RAMFile); err != nil {
			os.Remove(tmp)
			q.run(context.WithoutCancel(ctx), "cont", nil)
			return fmt.Errorf("sleep %q: %w", name, err)
		}
	}
	if err := syncRename(tmp, snap); err != nil {
		if b.onTmpfs(running) {
			// The machine goes on with its tmpfs memory: the record
			// must name it again, and the copy is stale from now on.
			b.mu.Lock()
			bx.rec.Machine.RAMFile = running
			b.mu.Unlock()
			b.saveLocked(bx)
			os.Remove(filepath.Join(bx.dir, ramFile))
		}
		q.run(context.WithoutCancel(ctx), "cont", nil)
		return fmt.Errorf("sleep %q: %w", name, err)
	}
	p.stopping.Store(true)
	if _, err := q.run(ctx, "quit", nil); err != nil {
		b.log.Warn("qmp quit failed, killing", "box", name, "err", err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.kill(5 * time.Second)
	}
	return b.clearPID(bx)
}

// resumeInterruptedSleep resumes a re-adopted machine that a sleep left
// paused: the gateway stopped (kill -9) between the sleep's QMP stop and
// its end, so the record still says running while the guest is frozen, and
// every later sleep failed ("Can't migrate the vm that was paused due to
// previous migration"). The sleep did not happen: cancel its migration,
// drop what it wrote (a snapshot of a machine that goes on is stale), name
// the memory the machine maps again, and go on. Found by the fault suite
// ("gateway kill -9 mid-sleep"). rec is the record being recovered.
func (b *Backend) resumeInterruptedSleep(ctx context.Context, name string, bx *box, rec *record, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	q, err := b.qmpOf(ctx, bx, p)
	if err != nil {
		return err
	}
	defer q.Close()
	st, err := q.status(ctx)
	if err != nil || st == "running" {
		return err
	}
	_, _ = q.run(ctx, "migrate_cancel", nil)
	if mp := memPathOf(cmdline(p.pid)); mp != "" {
		rec.Machine.RAMFile = mp
	}
	snap := filepath.Join(bx.dir, snapFile)
	os.Remove(snap + ".tmp")
	os.Remove(snap)
	if saved := filepath.Join(bx.dir, ramFile); rec.Machine.RAMFile != saved {
		os.Remove(saved)
	}
	if _, err := q.run(ctx, "cont", nil); err != nil {
		return fmt.Errorf("cont from %q: %w", st, err)
	}
	b.log.Info("recover: resumed a machine an interrupted sleep left paused", "box", name, "was", st)
	return nil
}

// memPathOf is the guest memory file a QEMU argv maps ("" without one).
func memPathOf(argv []string) string {
	for _, a := range argv {
		if !strings.HasPrefix(a, "memory-backend-file,") {
			continue
		}
		for kv := range strings.SplitSeq(a, ",") {
			if v, ok := strings.CutPrefix(kv, "mem-path="); ok {
				return v
			}
		}
	}
	return ""
}

func (b *Backend) clearPID(bx *box) error {
	b.mu.Lock()
	bx.rec.PID = 0
	b.mu.Unlock()
	return b.saveLocked(bx)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("snapshot fsync %s: %w", path, err)
	}
	return nil
}

func syncRename(tmp, dst string) error {
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fmt.Errorf("snapshot fsync: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// Wake restores the box from mem.snap, or cold-boots it on the same disk.
func (b *Backend) Wake(ctx context.Context, name string) (vm.WakeResult, error) {
	bx, err := b.get(name)
	if err != nil {
		return vm.WakeResult{}, err
	}
	snap := filepath.Join(bx.dir, snapFile)
	reason := ""
	if _, err := os.Stat(snap); err != nil {
		reason = "no memory snapshot (" + snapFile + " missing)"
	} else if bx.rec.Machine.QEMU == "" {
		reason = "no record of the machine the snapshot came from"
	} else if _, err := os.Stat(bx.rec.Machine.RAMFile); bx.rec.Machine.RAMFile != "" && err != nil {
		reason = "memory file " + ramFile + " missing"
	} else {
		err := b.restore(ctx, bx, snap)
		if err == nil {
			os.Remove(snap)
			return vm.WakeResult{}, nil
		}
		if ctx.Err() != nil {
			return vm.WakeResult{}, err
		}
		reason = "memory snapshot unusable: " + err.Error()
		os.Rename(snap, snap+".bad")
	}
	b.log.Warn("wake: cold boot", "box", name, "why", reason)
	if err := b.Start(ctx, name); err != nil {
		return vm.WakeResult{}, err
	}
	return vm.WakeResult{Cold: true, Reason: reason}, nil
}

func (b *Backend) restore(ctx context.Context, bx *box, snap string) error {
	m := bx.rec.Machine // the very machine the snapshot was taken from
	m.Incoming = true
	if m.Egress != "" {
		m.Forwarder = b.forwarder // a host-side program: the current one
	}
	if err := b.launch(bx, m); err != nil {
		return err
	}
	b.mu.Lock()
	p := bx.proc
	bx.rec.Machine.Incoming = false
	b.mu.Unlock()
	fail := func(err error) error {
		p.kill(5 * time.Second)
		b.clearPID(bx)
		return err
	}
	q, err := b.qmpOf(ctx, bx, p)
	if err != nil {
		return fail(err)
	}
	defer q.Close()
	if m.RAMFile != "" {
		if err := q.ignoreShared(ctx); err != nil {
			return fail(err)
		}
	}
	in, err := os.Open(snap)
	if err != nil {
		return fail(err)
	}
	err = q.passFD(ctx, "snapshot", in)
	in.Close()
	if err != nil {
		return fail(err)
	}
	if _, err := q.run(ctx, "migrate-incoming", map[string]any{"uri": "fd:snapshot"}); err != nil {
		return fail(err)
	}
	if err := q.waitIncoming(ctx); err != nil {
		return fail(err)
	}
	if _, err := q.run(ctx, "cont", nil); err != nil {
		return fail(err)
	}
	return nil
}

// Kill ends the machine at once; the disk stays.
func (b *Backend) Kill(ctx context.Context, name string) error {
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	if err := b.stop(bx); err != nil {
		return err
	}
	return b.clearPID(bx)
}

// stop ends the box's QEMU process, if it has one.
func (b *Backend) stop(bx *box) error {
	b.mu.Lock()
	p := bx.proc
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.kill(10 * time.Second)
}

// Destroy ends the machine and removes the box's directory.
func (b *Backend) Destroy(ctx context.Context, name string) error {
	bx, err := b.get(name)
	if err != nil {
		return err
	}
	if err := b.stop(bx); err != nil {
		return err
	}
	if bx.rec.SockDir != "" && bx.rec.SockDir != bx.dir {
		os.RemoveAll(bx.rec.SockDir)
	}
	if err := os.RemoveAll(bx.dir); err != nil {
		return fmt.Errorf("destroy %q: %w", name, err)
	}
	b.mu.Lock()
	delete(b.boxes, name)
	b.mu.Unlock()
	return nil
}

// Stats samples CPU since the last sample and private memory.
func (b *Backend) Stats(ctx context.Context, name string) (vm.Stats, error) {
	bx, p, err := b.running(name)
	if err != nil {
		return vm.Stats{}, err
	}
	priv, err := privateBytes(p.pid)
	if err != nil {
		return vm.Stats{}, fmt.Errorf("stats %q: %w", name, err)
	}
	ticks, err := cpuTicks(p.pid)
	if err != nil {
		return vm.Stats{}, fmt.Errorf("stats %q: %w", name, err)
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var pct float64
	if !bx.lastSample.IsZero() && ticks >= bx.lastTicks {
		// Linux reports times in USER_HZ = 100 ticks per second.
		pct = float64(ticks-bx.lastTicks) / 100 / now.Sub(bx.lastSample).Seconds() * 100
	}
	bx.lastTicks, bx.lastSample = ticks, now
	return vm.Stats{CPUPercent: pct, PrivateBytes: priv}, nil
}

// Records are this host's own: LocalRecords over the box.json files
// (Save, Recover); no other gateway sees them, so once is never asked.
func (b *Backend) Records(ctx context.Context, f vm.Follower, _ vm.Once) (vm.Records, error) {
	return vm.LocalRecords(ctx, b, f, b.log)
}

// Recover loads every box.json, re-adopts machines still running, marks
// boxes whose machine vanished failed, and kills QEMU processes under the
// data dir that belong to no box.
func (b *Backend) Recover(ctx context.Context) ([]vm.Box, error) {
	root := filepath.Join(b.dataDir, "boxes")
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	owned := map[int]bool{}
	var out []vm.Box
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		name, dir := e.Name(), filepath.Join(root, e.Name())
		if err := vm.ValidName(name); err != nil {
			b.log.Warn("recover: skipping directory with a bad box name", "dir", dir)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, recordFile))
		var rec record
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err != nil || rec.Box.Name != name {
			// Crashed mid-create: nothing worth keeping was there yet.
			b.log.Warn("recover: removing box directory without a valid record", "dir", dir, "err", err)
			os.RemoveAll(dir)
			continue
		}
		if rec.SockDir == "" {
			rec.SockDir = dir
		}
		bx := &box{dir: dir, rec: rec}
		b.mu.Lock()
		if b.boxes[name] != nil {
			b.mu.Unlock()
			continue
		}
		b.boxes[name] = bx
		b.mu.Unlock()
		switch {
		case rec.PID > 0 && isOurs(rec.PID, rec.SockDir):
			p, err := adoptProc(rec.PID, filepath.Join(dir, logFile))
			if err != nil {
				rec.Box.State, rec.Box.Reason = vm.Failed, "re-adopt qemu: "+err.Error()
				break
			}
			owned[rec.PID] = true
			bx.proc = p
			if rec.Box.State == vm.Running {
				if err := b.resumeInterruptedSleep(ctx, name, bx, &rec, p); err != nil {
					p.kill(10 * time.Second)
					rec.PID = 0
					rec.Box.State, rec.Box.Reason = vm.Failed, "a sleep the gateway's stop interrupted left the machine paused, and it did not resume: "+err.Error()
					break
				}
			}
			b.dropTmpRAMAfter(p, rec.Machine.RAMFile)
			if rec.Box.State == vm.Sleeping || rec.Box.State == vm.Failed || rec.Box.State == vm.Destroyed {
				// A machine runs for a box that should have none.
				p.kill(10 * time.Second)
				rec.PID = 0
			}
			b.log.Info("recover: re-adopted qemu", "box", name, "pid", p.pid)
		case rec.Box.State == vm.Running && rec.Machine.QEMU != "" && fileExists(filepath.Join(dir, snapFile)):
			// The gateway stopped in the middle of a sleep, after the
			// snapshot was complete (it is renamed into place only then).
			rec.Box.State = vm.Sleeping
			rec.Box.Reason = "the gateway stopped during sleep; the memory snapshot was complete"
			rec.PID = 0
		case rec.Box.State == vm.Running || rec.Box.State == vm.Creating:
			rec.Box.State = vm.Failed
			rec.Box.Reason = fmt.Sprintf("qemu process %d was gone when the gateway restarted", rec.PID)
			rec.PID = 0
		default:
			rec.PID = 0
		}
		bx.rec = rec
		if err := b.saveLocked(bx); err != nil {
			b.log.Error("recover: save record", "box", name, "err", err)
		}
		out = append(out, rec.Box)
	}
	for pid, sock := range qemuUnder(b.dataDir) {
		if owned[pid] {
			continue
		}
		b.log.Warn("recover: killing qemu process with no box", "pid", pid, "qmp", sock)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	b.sweepRAMDir()
	return out, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Close drops the backend's hold on the machines; they keep running and a
// later backend re-adopts them. The tmpfs RAM dir goes when no machine
// uses it any more (os.Remove leaves a non-empty one alone).
func (b *Backend) Close() error {
	if b.ramDir != "" {
		b.ramMu.Lock()
		os.Remove(b.ramDir)
		b.ramMu.Unlock()
	}
	return nil
}
