package qemu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/vm/kernel"
)

// bootKernelFor is the kernel a cold boot of a box with vcpus uses: the
// backend's, unless that kernel was built without SMP (the small kernel
// is: a second CPU would sit unused and nproc would say 1) and the box
// asks for more than one; then the host's stock kernel, which has SMP,
// with its own initramfs (its modules), prepared once.
func (b *Backend) bootKernelFor(ctx context.Context, vcpus int) (bootKernel, error) {
	boot := b.bootKernel(ctx)
	if vcpus <= 1 || hasSMP(boot.Kernel) {
		return boot, nil
	}
	b.bootMu.Lock()
	defer b.bootMu.Unlock()
	if b.smp != nil {
		return *b.smp, nil
	}
	k, err := kernel.Stock(b.dataDir)
	if err != nil {
		return bootKernel{}, fmt.Errorf("%d vCPUs need a kernel with SMP (the small guest kernel has none), and the stock one is unusable: %w", vcpus, err)
	}
	plain, image, err := buildInitramfs(ctx, b.dataDir, b.init, k)
	if err != nil {
		return bootKernel{}, fmt.Errorf("%d vCPUs: the stock kernel's initramfs: %w", vcpus, err)
	}
	b.smp = &bootKernel{Kernel: k, Initramfs: plain, ImageInitramfs: image, FreePages: reportsFreePages(k)}
	b.log.Info("boxes of more than one vCPU boot the stock kernel (the small one is built without SMP)", "kernel", k.Path)
	return *b.smp, nil
}

// hasSMP reports whether k can run more than one CPU: the stock kernel
// can; the small kernel says so in the config installed beside it.
func hasSMP(k kernel.Kernel) bool {
	if k.Kind != kernel.KindSmall {
		return true
	}
	f, err := os.Open(filepath.Join(filepath.Dir(k.Path), "config"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "CONFIG_SMP=y" {
			return true
		}
	}
	return false
}
