// Package host answers what this machine offers the QEMU backend: the QEMU
// binary, its version, the CPU clock and whether KVM really works. It stays
// free of vm types so `sbx doctor` (package vm) and the backend share it.
package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// QEMUBinary is the emulator the backend runs.
const QEMUBinary = "qemu-system-x86_64"

// ErrNoQEMU names the fix when QEMU is missing.
var ErrNoQEMU = errors.New("qemu-system-x86_64 not found: install qemu-system-x86 (go tool -modfile=tools/go.mod task deps)")

// FindQEMU returns the path of qemu-system-x86_64.
func FindQEMU() (string, error) {
	p, err := exec.LookPath(QEMUBinary)
	if err != nil {
		return "", ErrNoQEMU
	}
	return p, nil
}

// Version returns QEMU's version line, e.g. "QEMU emulator version 7.2.22 (...)".
func Version(ctx context.Context, qemu string) (string, error) {
	out, err := exec.CommandContext(ctx, qemu, "-version").Output()
	if err != nil {
		return "", fmt.Errorf("%s -version: %w", qemu, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// CPUKHz returns the host CPU clock in kHz from /proc/cpuinfo, 0 if unknown.
// Guests get it as tsc_early_khz: without it TCG boots sometimes hang
// calibrating the TSC.
func CPUKHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0
		}
		return int(mhz * 1000)
	}
	return 0
}

// Verdict is the accelerator choice and why.
type Verdict struct {
	Accel  string    `json:"accel"` // "kvm" or "tcg"
	Why    string    `json:"why"`
	Key    string    `json:"key"` // what the probe depended on; a change re-probes
	Probed time.Time `json:"probed"`
}

// ProbeConfig is what the accelerator probe boots.
type ProbeConfig struct {
	QEMU    string
	Kernel  string // uncompressed vmlinux
	Release string
	// Cache is where the verdict is kept (e.g. <data>/accel.json); empty
	// means probe every time.
	Cache string
	// Shared is a second, machine-wide copy (<build cache>/accel.json):
	// the verdict is the host's, not the data dir's, so a new data dir (a
	// second checkout, a test) takes it from there instead of spending
	// ProbeTimeout on a probe boot. Empty: none.
	Shared string
	// Log hears when a probe boot starts and how it ended: it can take up
	// to ProbeTimeout, and a first start would otherwise say nothing
	// meanwhile. A cached verdict logs nothing. Nil logs nowhere.
	Log *slog.Logger
}

// ProbeTimeout bounds the KVM probe boot; a guest that has not finished by
// then has stalled under this KVM.
const ProbeTimeout = 20 * time.Second

// ChooseAccel returns KVM when a probe boot under KVM succeeds and TCG
// otherwise. /dev/kvm existing is not enough: some hosts expose a
// paravirtual KVM that aborts or fails on a stock guest kernel. The verdict
// is cached in cfg.Cache keyed by QEMU, kernel and host kernel. An error
// means ctx ended during the probe: nothing was learnt, nothing is cached.
func ChooseAccel(ctx context.Context, cfg ProbeConfig) (Verdict, error) {
	key := probeKey(cfg)
	for _, f := range []string{cfg.Cache, cfg.Shared} {
		if v, ok := cachedVerdict(f, key); ok {
			if f != cfg.Cache {
				keepVerdict(cfg.Cache, v)
			}
			return v, nil
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	v := probe(ctx, cfg)
	if err := ctx.Err(); err != nil {
		return Verdict{}, fmt.Errorf("probe KVM: %w", context.Cause(ctx))
	}
	v.Key, v.Probed = key, time.Now().UTC()
	keepVerdict(cfg.Cache, v)
	keepVerdict(cfg.Shared, v)
	return v, nil
}

// BuildCache is the machine's build cache the tasks fill (kernels,
// images) and the shared KVM verdict lives in: sbxCache (SBX_CACHE) when
// set, else the user's cache dir + "/sbx" (~/.cache/sbx); "" when neither.
func BuildCache(sbxCache string) string {
	if sbxCache != "" {
		return sbxCache
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sbx")
}

// SharedVerdict is the machine-wide KVM verdict file in buildCache; ""
// when there is no build cache.
func SharedVerdict(buildCache string) string {
	if buildCache == "" {
		return ""
	}
	return filepath.Join(buildCache, "accel.json")
}

// cachedVerdict reads a verdict from file when it was made for key.
func cachedVerdict(file, key string) (Verdict, bool) {
	if file == "" {
		return Verdict{}, false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return Verdict{}, false
	}
	var v Verdict
	if json.Unmarshal(b, &v) != nil || v.Key != key || (v.Accel != "kvm" && v.Accel != "tcg") {
		return Verdict{}, false
	}
	return v, true
}

// keepVerdict writes v to file (best effort: a cache).
func keepVerdict(file string, v Verdict) {
	if file == "" {
		return
	}
	if b, err := json.MarshalIndent(v, "", "  "); err == nil {
		_ = os.MkdirAll(filepath.Dir(file), 0o755)
		_ = WriteFileAtomic(file, append(b, '\n'), 0o644)
	}
}

// CachedAccel returns the cached verdict, if any, without probing.
func CachedAccel(cache string) (Verdict, bool) {
	b, err := os.ReadFile(cache)
	if err != nil {
		return Verdict{}, false
	}
	var v Verdict
	if json.Unmarshal(b, &v) != nil || v.Accel == "" {
		return Verdict{}, false
	}
	return v, true
}

func probeKey(cfg ProbeConfig) string {
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	rel := make([]byte, 0, len(uts.Release))
	for _, c := range uts.Release {
		if c == 0 {
			break
		}
		rel = append(rel, byte(c))
	}
	var qsize, ksize int64
	if fi, err := os.Stat(cfg.QEMU); err == nil {
		qsize = fi.Size()
	}
	if fi, err := os.Stat(cfg.Kernel); err == nil {
		ksize = fi.Size()
	}
	// The kernel by name and size, not path: the stock one is unpacked
	// into each data dir, and the shared verdict must match them all.
	return fmt.Sprintf("host=%s qemu=%s/%d kernel=%s/%d", rel, cfg.QEMU, qsize, filepath.Base(cfg.Kernel), ksize)
}

// probe boots the kernel under KVM with no root filesystem: a working KVM
// runs it to its "cannot mount root" panic, which with panic=-1 and
// -no-reboot makes QEMU exit 0. A broken one aborts QEMU ("failed to set
// MSR") or stalls on an emulation failure until the timeout.
func probe(ctx context.Context, cfg ProbeConfig) Verdict {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return Verdict{Accel: "tcg", Why: fmt.Sprintf("no usable /dev/kvm (%v)", err)}
	}
	f.Close()
	cfg.Log.Info("probing KVM (a test boot)", "up_to", ProbeTimeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.QEMU,
		"-M", "microvm,x-option-roms=off,rtc=on", "-accel", "kvm", "-cpu", "host",
		"-m", "128M", "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
		"-no-reboot", "-kernel", cfg.Kernel, "-append", "panic=-1 quiet reboot=t")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	msg := strings.TrimSpace(out.String())
	if len(msg) > 200 {
		msg = msg[:200]
	}
	if parent.Err() != nil {
		return Verdict{} // the caller's ctx ended: no verdict
	}
	v := verdict(ctx, err, msg, cfg.Kernel, took)
	cfg.Log.Info("KVM probe done", "accel", v.Accel, "why", v.Why, "took", took)
	return v
}

// verdict judges the probe boot's outcome.
func verdict(ctx context.Context, err error, msg, kernel string, took time.Duration) Verdict {
	switch {
	case ctx.Err() != nil:
		return Verdict{Accel: "tcg", Why: fmt.Sprintf("KVM probe boot did not finish in %v (guest stalled under this KVM)", ProbeTimeout)}
	case err != nil:
		return Verdict{Accel: "tcg", Why: fmt.Sprintf("KVM probe boot failed: %v: %s", err, msg)}
	case strings.Contains(msg, "emulation failure") || strings.Contains(msg, "KVM internal error"):
		return Verdict{Accel: "tcg", Why: "KVM probe boot hit an emulation failure: " + msg}
	}
	return Verdict{Accel: "kvm", Why: fmt.Sprintf("KVM probe boot of %s succeeded in %v", filepath.Base(kernel), took)}
}

// WriteFileAtomic writes data to path through a temporary file, fsync and
// rename, so a crash leaves either the old or the new content.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
