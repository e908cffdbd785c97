package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// makeWorkspace creates a sparse ext4 file of sizeMiB at path.
func makeWorkspace(ctx context.Context, path string, sizeMiB int) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		if _, serr := os.Stat("/sbin/mkfs.ext4"); serr == nil {
			mkfs = "/sbin/mkfs.ext4"
		} else {
			return fmt.Errorf("mkfs.ext4 not found: install e2fsprogs (go tool -modfile=tools/go.mod task deps)")
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create workspace disk: %w", err)
	}
	if err := f.Truncate(int64(sizeMiB) << 20); err != nil {
		f.Close()
		return fmt.Errorf("size workspace disk %s to %d MiB: %w", path, sizeMiB, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create workspace disk: %w", err)
	}
	// lazy init keeps the file sparse and mkfs fast; the root of the
	// filesystem becomes /workspace, so no lost+found noise is wanted but
	// harmless.
	out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", "-L", "workspace", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeOverlay creates a qcow2 overlay at path over the read-only base image.
func makeOverlay(ctx context.Context, path, base string) error {
	img, err := exec.LookPath("qemu-img")
	if err != nil {
		return fmt.Errorf("qemu-img not found: install qemu-utils (go tool -modfile=tools/go.mod task deps)")
	}
	out, err := exec.CommandContext(ctx, img, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create overlay %s over %s: %w: %s", path, base, err, strings.TrimSpace(string(out)))
	}
	return nil
}
