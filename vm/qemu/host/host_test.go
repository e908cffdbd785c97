package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sbx.dev/sbx/vm/kernel"
)

// TestChooseAccel runs the real probe boot and checks the verdict is cached
// and reused. On these hosts /dev/kvm is a paravirtual KVM that cannot run
// the guest, so TCG with a reason is expected there; on a real host KVM.
func TestChooseAccel(t *testing.T) {
	q, err := FindQEMU()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k, err := kernel.Resolve(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "accel.json")
	v := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: k.Path, Cache: cache})
	t.Logf("accel %s: %s", v.Accel, v.Why)
	if v.Accel != "kvm" && v.Accel != "tcg" || v.Why == "" {
		t.Fatalf("verdict %+v", v)
	}
	c, ok := CachedAccel(cache)
	if !ok || c.Accel != v.Accel || c.Key != v.Key {
		t.Fatalf("cached %+v, want %+v", c, v)
	}
	// A cached verdict is reused without probing (a doctored cache proves it).
	c.Why = "from cache"
	b := []byte(`{"accel":"` + c.Accel + `","why":"from cache","key":` + quote(c.Key) + `}`)
	if err := os.WriteFile(cache, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if v2 := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: k.Path, Cache: cache}); v2.Why != "from cache" {
		t.Fatalf("probe ran again despite a matching cache: %+v", v2)
	}
}

func quote(s string) string {
	b := []byte{'"'}
	for _, c := range []byte(s) {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}

func TestCPUKHz(t *testing.T) {
	if k := CPUKHz(); k < 100_000 {
		t.Fatalf("CPUKHz = %d, want a plausible clock", k)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.json")
	for _, s := range []string{"one", "two"} {
		if err := WriteFileAtomic(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != s {
			t.Fatalf("content %q, want %q", b, s)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(p))
	if len(ents) != 1 {
		t.Fatalf("temp files left: %v", ents)
	}
}
