package host

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/vm/kernel"
)

// TestChooseAccel runs the real probe boot and checks the verdict is cached
// and reused. On these hosts /dev/kvm is a paravirtual KVM that cannot run
// the guest, so TCG with a reason is expected there; on a real host KVM.
func TestChooseAccel(t *testing.T) {
	q, k, dir := probeInputs(t)
	cache := filepath.Join(dir, "accel.json")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	v, err := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: k.Path, Cache: cache, Log: log})
	t.Logf("accel %s: %s\n%s", v.Accel, v.Why, logs.String())
	if err != nil || v.Accel != "kvm" && v.Accel != "tcg" || v.Why == "" {
		t.Fatalf("verdict %+v, %v", v, err)
	}
	// A probe boot says it starts, and how it ended and how long it took.
	if _, err := os.Stat("/dev/kvm"); err == nil {
		for _, want := range []string{`msg="probing KVM (a test boot)" up_to=20s`, `msg="KVM probe done" accel=` + v.Accel, " took="} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("probe log lacks %q:\n%s", want, logs.String())
			}
		}
	}
	logs.Reset()
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
	if v2, err := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: k.Path, Cache: cache, Log: log}); err != nil || v2.Why != "from cache" {
		t.Fatalf("probe ran again despite a matching cache: %+v, %v", v2, err)
	}
	// A second start with the verdict cached says nothing extra.
	if logs.Len() != 0 {
		t.Errorf("a cached verdict logged:\n%s", logs.String())
	}
}

// TestChooseAccelSharedVerdict: a new data dir takes the machine-wide
// verdict (a second checkout's first start skips the probe boot) and keeps
// its own copy; a shared verdict made for another kernel is not used.
func TestChooseAccelSharedVerdict(t *testing.T) {
	q, k, dir := probeInputs(t)
	shared := filepath.Join(dir, "cache", "accel.json")
	first := filepath.Join(dir, "one", "accel.json")
	v, err := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: k.Path, Cache: first, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := CachedAccel(shared); !ok || c.Key != v.Key {
		t.Fatalf("probe left no shared verdict: %+v", c)
	}
	// The same kernel unpacked into another data dir: same name and size.
	other := filepath.Join(dir, "two")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(k.Path)
	if err != nil {
		t.Fatal(err)
	}
	kernel2 := filepath.Join(other, filepath.Base(k.Path))
	if err := os.WriteFile(kernel2, body, 0o644); err != nil {
		t.Fatal(err)
	}
	doctored := []byte(`{"accel":"` + v.Accel + `","why":"shared","key":` + quote(v.Key) + `}`)
	if err := os.WriteFile(shared, doctored, 0o644); err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(other, "accel.json")
	var logs bytes.Buffer
	v2, err := ChooseAccel(context.Background(), ProbeConfig{QEMU: q, Kernel: kernel2, Cache: second, Shared: shared,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil || v2.Why != "shared" || logs.Len() != 0 {
		t.Fatalf("second data dir: %+v, %v, log %q; want the shared verdict without a probe", v2, err, logs.String())
	}
	if c, ok := CachedAccel(second); !ok || c.Why != "shared" {
		t.Errorf("second data dir kept no copy of the shared verdict: %+v", c)
	}
	// A shared verdict for another kernel is not this one's.
	stale := []byte(`{"accel":"kvm","why":"stale","key":"host=x qemu=y/1 kernel=z/2"}`)
	if err := os.WriteFile(shared, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := cachedVerdict(shared, v.Key); ok {
		t.Errorf("a verdict for another key was taken: %+v", got)
	}
}

// TestChooseAccelInterrupted: a probe cut short by its context is no
// verdict — an error naming the cause, and nothing cached (a TCG verdict
// cached from an interrupt would slow every later start's boxes).
func TestChooseAccelInterrupted(t *testing.T) {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		t.Skipf("no usable /dev/kvm, so no probe boot to interrupt: %v", err)
	} else {
		f.Close()
	}
	q, k, dir := probeInputs(t)
	cause := errors.New("interrupted by the test")
	ctx, cancel := context.WithCancelCause(context.Background())
	// Cancel once the probe says it started: the boot is under way.
	started := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		if bytes.Contains(p, []byte("probing KVM")) {
			cancel(cause)
		}
		return len(p), nil
	}), nil))
	cache := filepath.Join(dir, "accel.json")
	start := time.Now()
	v, err := ChooseAccel(ctx, ProbeConfig{QEMU: q, Kernel: k.Path, Cache: cache, Log: started})
	if !errors.Is(err, cause) || v.Accel != "" {
		t.Fatalf("ChooseAccel after cancel = %+v, %v; want no verdict and the cause", v, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancelled probe returned after %v", took)
	}
	if _, ok := CachedAccel(cache); ok {
		t.Errorf("an interrupted probe cached a verdict")
	}
}

// probeInputs finds QEMU and a kernel to probe with, and a fresh dir for
// the verdict.
func probeInputs(t *testing.T) (qemu string, k kernel.Kernel, dir string) {
	t.Helper()
	qemu, err := FindQEMU()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if k, err = kernel.Resolve(dir); err != nil {
		t.Fatal(err)
	}
	return qemu, k, dir
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

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
