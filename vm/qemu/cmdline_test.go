package qemu

import (
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/vm/kernel"
)

// Regression (claude SIGILL under TCG): the agent image's Claude Code needs
// AVX2, which QEMU's default TCG CPU lacks; every TCG box gets -cpu max (minus
// the slow-under-TCG string copy hints), a KVM box the host's CPU.
func TestCPUModel(t *testing.T) {
	for _, tc := range []struct {
		accel string
		kind  kernel.Kind
		want  string
	}{
		{"tcg", kernel.KindSmall, "max,erms=off,fsrm=off"},
		{"tcg", kernel.KindStock, "max,erms=off,fsrm=off"},
		{"kvm", kernel.KindSmall, "host"},
		{"kvm", kernel.KindStock, "host"},
	} {
		m := machine{QEMU: "qemu-system-x86_64", Accel: tc.accel, Dir: "/d", SockDir: "/d", Name: "b",
			MemoryMiB: 256, Kernel: kernel.Kernel{Kind: tc.kind, Path: "/k"}}
		a := m.args()
		i := slices.Index(a, "-cpu")
		if i < 0 || a[i+1] != tc.want {
			t.Errorf("%s/%s: want -cpu %s in %s", tc.accel, tc.kind, tc.want, strings.Join(a, " "))
		}
		if n := strings.Count(strings.Join(a, " "), "-cpu "); n != 1 {
			t.Errorf("%s/%s: %d -cpu flags", tc.accel, tc.kind, n)
		}
	}
}

// The small kernel (one CPU, no SMP) unpacks the initramfs before the
// initcalls; the stock kernel keeps its asynchronous unpack.
func TestInitramfsSync(t *testing.T) {
	for _, tc := range []struct {
		kind kernel.Kind
		want bool
	}{{kernel.KindSmall, true}, {kernel.KindStock, false}} {
		m := machine{QEMU: "qemu-system-x86_64", Accel: "tcg", Dir: "/d", SockDir: "/d", Name: "b",
			MemoryMiB: 256, Kernel: kernel.Kernel{Kind: tc.kind, Path: "/k"}}
		a := m.args()
		i := slices.Index(a, "-append")
		if got := strings.Contains(a[i+1], "initramfs_async=0"); got != tc.want {
			t.Errorf("%s: initramfs_async=0 in %q: %v, want %v", tc.kind, a[i+1], got, tc.want)
		}
	}
}
