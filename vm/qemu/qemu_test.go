package qemu

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/vmtest"
)

// smallKernel finds a small kernel built by `go tool -modfile=tools/go.mod task kernel`: in
// $SBX_DATA, the repository's .sbx, or the build cache.
func smallKernel() (kernel.Kernel, bool) {
	dirs := []string{os.Getenv("SBX_DATA"), "../../.sbx"}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if k, err := kernel.Small(d); err == nil {
			k.Path, _ = filepath.Abs(k.Path)
			return k, true
		}
	}
	cache := os.Getenv("SBX_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "sbx")
		}
	}
	paths, _ := filepath.Glob(filepath.Join(cache, "kernel", "*", "vmlinux"))
	for _, p := range paths {
		rel, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "release"))
		return kernel.Kernel{Kind: kernel.KindSmall, Path: p, Release: strings.TrimSpace(string(rel))}, true
	}
	return kernel.Kernel{}, false
}

// conformance runs the vm.Backend suite against real QEMU with kernel k.
func conformance(t *testing.T, k kernel.Kernel) {
	init := testInit(t)
	dir := t.TempDir()
	var mu sync.Mutex
	var cur *Backend
	backend := func(t *testing.T) vm.Backend {
		b, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: init})
		if err != nil {
			t.Fatalf("qemu.New: %v", err)
		}
		mu.Lock()
		cur = b
		mu.Unlock()
		t.Logf("kernel %s %s, accel %s (%s)", k.Kind, k.Path, b.Accel().Accel, b.Accel().Why)
		return b
	}
	t.Cleanup(func() {
		// Nothing may outlive the test.
		for pid := range qemuUnder(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	vmtest.Run(t, vmtest.Setup{
		Backend: backend,
		Crash: func(t *testing.T, name string) {
			mu.Lock()
			pid := cur.PID(name)
			mu.Unlock()
			if pid == 0 {
				t.Fatalf("box %s has no qemu process", name)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
		Leftovers: func(t *testing.T, name string) []string {
			var left []string
			boxDir := filepath.Join(dir, "boxes", name)
			if _, err := os.Stat(boxDir); err == nil {
				left = append(left, boxDir)
			}
			for pid, sock := range qemuUnder(dir) {
				if strings.HasPrefix(sock, boxDir+"/") {
					left = append(left, "qemu pid "+sock)
					_ = pid
				}
			}
			return left
		},
		CorruptSnapshot: func(t *testing.T, name string) {
			if err := os.WriteFile(filepath.Join(dir, "boxes", name, snapFile), []byte("not a snapshot"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		DropSnapshot: func(t *testing.T, name string) {
			if err := os.Remove(filepath.Join(dir, "boxes", name, snapFile)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestConformanceStock(t *testing.T) {
	k, err := kernel.Stock(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, k)
}

func TestConformanceSmall(t *testing.T) {
	k, ok := smallKernel()
	if !ok {
		t.Skip("no small kernel built (go tool -modfile=tools/go.mod task kernel); the stock kernel suite covers the backend")
	}
	conformance(t, k)
}

func TestArgs(t *testing.T) {
	base := machine{QEMU: "qemu-system-x86_64", Accel: "tcg", Initramfs: "/i.cpio", Dir: "/d/boxes/b",
		SockDir: "/d/boxes/b", Name: "b", MemoryMiB: 256, VCPUs: 1, HostKHz: 2_000_000}
	small, stock := base, base
	small.Kernel = kernel.Kernel{Kind: kernel.KindSmall, Path: "/k/vmlinux"}
	stock.Kernel = kernel.Kernel{Kind: kernel.KindStock, Path: "/k/vmlinux-6.1", Modules: []string{"/lib/modules/x/virtio_mmio.ko", "/lib/modules/x/ext4.ko"}}
	for _, tc := range []struct {
		name     string
		m        machine
		want     []string // substrings of the joined command line
		wantNot  []string
		wantPair [2]string // flag followed by value
	}{
		{"small", small,
			[]string{"microvm,x-option-roms=off,pit=on,pic=on,isa-serial=off,rtc=on,acpi=off", "tsc_early_khz=2000000", "nolapic_timer", "reboot=t", "no_timer_check", "-nodefaults", "-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny", "-no-user-config", "serial=sbx-workspace", "name=sbx.agent"},
			[]string{"-netdev", "-device virtio-net", "sbx.modules", "sbx-root", "-incoming"},
			[2]string{"-accel", "tcg,tb-size=32"}},
		{"stock", stock,
			[]string{"sbx.modules=virtio_mmio.ko,ext4.ko", "rtc=on"},
			[]string{"acpi=off", "nolapic_timer", "-netdev"},
			[2]string{"-m", "256M"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.m.args()
			line := strings.Join(a, " ")
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("missing %q in %s", w, line)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(line, w) {
					t.Errorf("unexpected %q in %s", w, line)
				}
			}
			if i := slices.Index(a, tc.wantPair[0]); i < 0 || a[i+1] != tc.wantPair[1] {
				t.Errorf("want %s %s in %s", tc.wantPair[0], tc.wantPair[1], line)
			}
			if qmpPathOf(append([]string{"/usr/bin/qemu-system-x86_64"}, a...)) != "/d/boxes/b/qmp.sock" {
				t.Errorf("qmpPathOf does not find our socket in %s", line)
			}
		})
	}
	e := small
	e.Egress, e.Forwarder = "/run/sbx/egress/b.sock", "/usr/local/bin/sbx"
	line := strings.Join(e.args(), " ")
	for _, w := range []string{
		"-netdev user,id=egress,restrict=on,ipv6=off,guestfwd=tcp:10.0.2.100:80-cmd:/usr/local/bin/sbx vm-fwd /run/sbx/egress/b.sock",
		"-device virtio-net-device,netdev=egress", "sbx.net=1",
		"-sandbox on,obsolete=deny,elevateprivileges=allow,spawn=allow,resourcecontrol=deny",
	} {
		if !strings.Contains(line, w) {
			t.Errorf("egress: missing %q in %s", w, line)
		}
	}
	for _, bad := range []machine{
		{Egress: "/a,b.sock", Forwarder: "/sbx"},
		{Egress: "/a.sock", Forwarder: "/opt/my app/sbx"},
		{Egress: "/a.sock", Forwarder: "sbx"},
		{Egress: "/a.sock", Forwarder: "/sbx,x"},
	} {
		if checkEgress(bad) == nil {
			t.Errorf("checkEgress(%+v) accepted", bad)
		}
	}
	if checkEgress(e) != nil || checkEgress(small) != nil {
		t.Errorf("checkEgress refused a good machine")
	}
	r := small
	r.Root, r.Incoming, r.RAMFile = true, true, "/d/boxes/b/mem.ram"
	line = strings.Join(r.args(), " ")
	for _, w := range []string{"serial=sbx-root", "format=qcow2", "-incoming defer", ",memory-backend=ram",
		"memory-backend-file,id=ram,size=256M,mem-path=/d/boxes/b/mem.ram,share=on"} {
		if !strings.Contains(line, w) {
			t.Errorf("missing %q in %s", w, line)
		}
	}
}
