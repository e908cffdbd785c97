package qemu

import (
	"context"

	"sbx.dev/sbx/vm/kernel"
)

// bootKernel is what a cold boot needs of the guest kernel: the kernel, the
// initramfs generated for it (with and without busybox), and whether it
// reports free pages to the balloon.
type bootKernel struct {
	Kernel         kernel.Kernel
	Initramfs      string
	ImageInitramfs string // boxes with an image root: no busybox
	FreePages      bool
}

// bootKernel returns the kernel the next cold boot uses. A backend that
// chose the stock kernel because the small one was not built yet switches
// to the small one on the first boot after `task kernel` installs it (`task
// up` builds it in the background while the gateway runs), and until then
// says once why boxes boot the stock kernel. A wake from a snapshot keeps
// the kernel it was taken with (the record's machine), whatever this says.
func (b *Backend) bootKernel(ctx context.Context) bootKernel {
	b.bootMu.Lock()
	defer b.bootMu.Unlock()
	if !b.upgrade {
		return b.boot
	}
	if !kernel.SmallInstalled(b.dataDir) {
		if !b.saidStock {
			b.saidStock = true
			b.log.Warn("boxes boot the stock Debian kernel: the small guest kernel is not built yet; "+
				"`go tool -modfile=tools/go.mod task kernel` builds it (~10 min once; `task up` starts it in the background) "+
				"and new boxes switch to it as soon as it is installed",
				"kernel", b.boot.Kernel.Path)
		}
		return b.boot
	}
	k, err := kernel.Small(b.dataDir)
	if err == nil {
		var plain, image string
		if plain, image, err = buildInitramfs(ctx, b.dataDir, b.init, k); err == nil {
			b.boot = bootKernel{Kernel: k, Initramfs: plain, ImageInitramfs: image, FreePages: reportsFreePages(k)}
			b.upgrade = false
			b.log.Info("small guest kernel installed: new boxes boot it", "kernel", k.Path, "release", k.Release)
			return b.boot
		}
	}
	// A broken install must not stop boxes: keep booting the stock kernel
	// and try again on the next boot (said once).
	if !b.saidBroken {
		b.saidBroken = true
		b.log.Warn("small guest kernel installed but unusable: boxes keep booting the stock one", "err", err)
	}
	return b.boot
}
