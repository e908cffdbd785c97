// Package kernel finds the guest kernel a box boots: the small one built by
// `go tool -modfile=tools/go.mod task kernel` when it exists, else the host's stock Debian kernel,
// whose compressed vmlinuz is unpacked to the uncompressed vmlinux that QEMU's
// microvm machine boots directly (PVH entry).
package kernel

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Kind says which guest kernel a Kernel is.
type Kind string

const (
	// KindSmall is the project's own tinyconfig-based kernel: no modules needed.
	KindSmall Kind = "small"
	// KindStock is the host distribution's kernel: the guest init loads Modules.
	KindStock Kind = "stock"
)

// Kernel is a guest kernel ready to boot with QEMU -kernel.
type Kernel struct {
	Kind Kind
	// Path is an uncompressed vmlinux (ELF with a PVH note).
	Path string
	// Release is the kernel release (uname -r), empty when unknown.
	Release string
	// Modules are absolute .ko paths the guest init must load, in load order
	// (dependencies first). Empty for the small kernel.
	Modules []string
}

// GuestModules are the modules a stock kernel needs to see the box's devices
// and mount its disks; their dependencies are resolved through modules.dep.
var GuestModules = []string{"virtio_mmio", "virtio_console", "virtio_blk", "virtio_net", "ext4"}

// Resolve returns the small kernel if it has been built, else the stock one.
func Resolve(dataDir string) (Kernel, error) {
	k, errSmall := Small(dataDir)
	if errSmall == nil {
		return k, nil
	}
	k, err := Stock(dataDir)
	if err != nil {
		return Kernel{}, fmt.Errorf("no guest kernel: %w (and %v)", err, errSmall)
	}
	return k, nil
}

// Small returns the small kernel installed by `go tool -modfile=tools/go.mod task kernel` under
// <dataDir>/kernel/small/.
func Small(dataDir string) (Kernel, error) {
	dir := filepath.Join(dataDir, "kernel", "small")
	path := filepath.Join(dir, "vmlinux")
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Kernel{}, fmt.Errorf("small guest kernel %s not built: run `go tool -modfile=tools/go.mod task kernel`", path)
		}
		return Kernel{}, fmt.Errorf("small guest kernel: %w", err)
	}
	if err := checkELF(path); err != nil {
		return Kernel{}, fmt.Errorf("small guest kernel %s is unusable (rebuild with `go tool -modfile=tools/go.mod task kernel`): %w", path, err)
	}
	rel, _ := os.ReadFile(filepath.Join(dir, "release"))
	return Kernel{Kind: KindSmall, Path: path, Release: strings.TrimSpace(string(rel))}, nil
}

// Stock returns the host's newest /boot/vmlinuz-* as an uncompressed vmlinux
// cached under <dataDir>/kernel/stock/, with the modules a guest needs.
func Stock(dataDir string) (Kernel, error) {
	return Host{}.Stock(dataDir)
}

// checkELF verifies that path is an x86-64 ELF executable.
func checkELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("not an ELF file: %w", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		return fmt.Errorf("ELF is %v/%v, want EM_X86_64/ET_EXEC", f.Machine, f.Type)
	}
	return nil
}

var elfMagic = []byte("\x7fELF")

func isELF(b []byte) bool { return bytes.HasPrefix(b, elfMagic) }

// SmallInstalled reports whether `task kernel` has finished installing the
// small kernel under <dataDir>/kernel/small/: its key file is written last,
// after vmlinux, release and config, so a half-done install reads false.
func SmallInstalled(dataDir string) bool {
	dir := filepath.Join(dataDir, "kernel", "small")
	for _, f := range []string{"key", "vmlinux", "release", "config"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			return false
		}
	}
	return true
}
