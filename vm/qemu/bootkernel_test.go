package qemu

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/kernel"
)

// TestBootsSmallKernelOnceInstalled: a gateway started before the small
// kernel is built (`task up` builds it in the background) boots boxes on the
// stock kernel and says so once; the first cold boot after the small kernel
// is installed uses it, without a restart.
func TestBootsSmallKernelOnceInstalled(t *testing.T) {
	small, ok := smallKernel()
	if !ok {
		t.Skip("no small kernel built (go tool -modfile=tools/go.mod task kernel) to install mid-run")
	}
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() {
		// Boxes outlive their manager by design: nothing may outlive the test.
		for pid := range qemuUnder(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	var logs testutil.SyncBuffer
	be, err := New(ctx, Config{DataDir: dir, Init: testInit(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m, err := vm.New(ctx, vm.Config{Backend: be, BootTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	boot := func(name string) kernel.Kind {
		t.Helper()
		if _, err := m.Create(ctx, name, vm.Spec{MemoryMiB: 256}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Start(ctx, name); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		bx, err := be.get(name)
		if err != nil {
			t.Fatal(err)
		}
		return bx.rec.Machine.Kernel.Kind
	}
	if got := boot("first"); got != kernel.KindStock {
		t.Fatalf("first box booted the %s kernel, want stock (no small kernel in %s)", got, dir)
	}

	// Half an install (vmlinux copied, key not yet written) is not ready.
	kdir := filepath.Join(dir, "kernel", "small")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, small.Path, filepath.Join(kdir, "vmlinux"))
	if got := boot("second"); got != kernel.KindStock {
		t.Fatalf("box booted the %s kernel during the install, want stock", got)
	}
	if n := strings.Count(logs.String(), "boxes boot the stock Debian kernel"); n != 1 {
		t.Errorf("stock-kernel notice logged %d times over two boots, want once:\n%s", n, logs.String())
	}

	// The rest of the install, key last as kernel.sh writes it.
	if err := os.WriteFile(filepath.Join(kdir, "release"), []byte(small.Release+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(filepath.Dir(small.Path), "config"), filepath.Join(kdir, "config"))
	if err := os.WriteFile(filepath.Join(kdir, "key"), []byte("test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := boot("third"); got != kernel.KindSmall {
		t.Fatalf("box after the install booted the %s kernel, want small:\n%s", got, logs.String())
	}
	if out := run(t, m, "third", "uname", "-r"); strings.TrimSpace(out) != small.Release {
		t.Errorf("uname -r in the box: %q, want the small kernel's %q", out, small.Release)
	}
	if !strings.Contains(logs.String(), "small guest kernel installed: new boxes boot it") {
		t.Errorf("switch to the small kernel not logged:\n%s", logs.String())
	}
	if got := be.Kernel().Kind; got != kernel.KindSmall {
		t.Errorf("Backend.Kernel() = %s after the switch, want small", got)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
