package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/vmtest"
)

// benchSetup is shared by the VM benchmarks: the best kernel found (small,
// else stock), the probed accelerator, one Manager.
type benchSetup struct {
	m   *vm.Manager
	b   *Backend
	dir string
}

func newBench(b *testing.B) *benchSetup {
	b.Helper()
	dir := b.TempDir()
	k, ok := smallKernel()
	if !ok {
		var err error
		if k, err = kernel.Stock(dir); err != nil {
			b.Fatal(err)
		}
	}
	be, err := New(context.Background(), Config{DataDir: dir, Kernel: &k, Init: testInit(b),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	m, err := vm.New(context.Background(), vm.Config{Backend: be, BootTimeout: 5 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, bx := range m.List() {
			m.Destroy(context.Background(), bx.Name)
		}
		m.Close()
	})
	return &benchSetup{m: m, b: be, dir: dir}
}

// samples collects one figure per iteration and reports min/median/p95/max.
type samples struct {
	name, unit string
	v          []float64
}

func (s *samples) add(x float64) { s.v = append(s.v, x) }

func (s *samples) stats() (lo, med, p95, hi float64) {
	v := slices.Clone(s.v)
	slices.Sort(v)
	if len(v) == 0 {
		return
	}
	at := func(q float64) float64 { return v[min(len(v)-1, int(q*float64(len(v)-1)+0.5))] }
	return v[0], at(0.5), at(0.95), v[len(v)-1]
}

func (s *samples) report(b *testing.B) {
	lo, med, p95, hi := s.stats()
	b.ReportMetric(lo, "min-"+s.unit)
	b.ReportMetric(med, "median-"+s.unit)
	b.ReportMetric(p95, "p95-"+s.unit)
	b.ReportMetric(hi, "max-"+s.unit)
	b.ReportMetric(0, "ns/op")
}

var table struct {
	sync.Mutex
	rows []*samples
}

// addRow keeps the last run of each figure (the testing package runs a
// benchmark once with N=1 before the real run).
func addRow(s *samples) {
	table.Lock()
	defer table.Unlock()
	for i, r := range table.rows {
		if r.name == s.name {
			table.rows[i] = s
			return
		}
	}
	table.rows = append(table.rows, s)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func startBox(ctx context.Context, b *testing.B, m *vm.Manager, name string) time.Duration {
	if _, err := m.Create(ctx, name, vm.Spec{MemoryMiB: 256, WorkspaceMiB: 256}); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if _, err := m.Start(ctx, name); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkVM measures the figures of `go tool -modfile=tools/go.mod task bench-vm` and prints
// them as one table. Run with -benchtime 20x.
func BenchmarkVM(b *testing.B) {
	s := newBench(b)
	ctx := context.Background()
	k := s.b.Kernel()
	fmt.Printf("kernel: %s %s (%s)\naccelerator: %s (%s)\n", k.Kind, k.Path, k.Release, s.b.Accel().Accel, s.b.Accel().Why)

	b.Run("ColdBoot", func(b *testing.B) {
		r := &samples{name: "cold boot to first agent reply", unit: "ms"}
		for i := range b.N {
			name := fmt.Sprintf("cold-%d", i)
			r.add(ms(startBox(ctx, b, s.m, name)))
			s.m.Destroy(ctx, name)
		}
		r.report(b)
		addRow(r)
	})

	const box = "bench"
	startBox(ctx, b, s.m, box)

	b.Run("Wake", func(b *testing.B) {
		r := &samples{name: "wake from snapshot to agent reply", unit: "ms"}
		for range b.N {
			if _, err := s.m.Sleep(ctx, box); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			bx, err := s.m.Wake(ctx, box)
			if err != nil {
				b.Fatal(err)
			}
			r.add(ms(time.Since(t0)))
			if bx.Reason != "restored from memory snapshot" {
				b.Fatalf("wake was not a restore: %s", bx.Reason)
			}
		}
		r.report(b)
		addRow(r)
	})

	b.Run("Exec", func(b *testing.B) {
		r := &samples{name: "exec round trip (true)", unit: "ms"}
		for range b.N {
			r.add(ms(vmtest.ExecTrue(ctx, b, s.m, box)))
		}
		r.report(b)
		addRow(r)
	})

	b.Run("CopyOut", func(b *testing.B) {
		const size = 16 << 20
		data := make([]byte, size)
		rand.Read(data)
		if err := s.m.WriteFile(ctx, box, "copy.bin", 0o644, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		r := &samples{name: "file copy out (16 MiB)", unit: "MB/s"}
		b.SetBytes(size)
		for range b.N {
			r.add(copyOut(ctx, b, s.m, box, "copy.bin", size))
		}
		r.report(b)
		addRow(r)
	})
	s.m.Destroy(ctx, box)

	b.Run("Parallel20", func(b *testing.B) {
		r := &samples{name: "wall time to boot 20 boxes in parallel", unit: "s"}
		mem := &samples{name: "private memory per idle box", unit: "MB"}
		for i := range b.N {
			names := make([]string, 20)
			for j := range names {
				names[j] = fmt.Sprintf("par-%d-%d", i, j)
				if _, err := s.m.Create(ctx, names[j], vm.Spec{MemoryMiB: 256, WorkspaceMiB: 64}); err != nil {
					b.Fatal(err)
				}
			}
			t0 := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, len(names))
			for _, n := range names {
				wg.Go(func() {
					if _, err := s.m.Start(ctx, n); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			r.add(time.Since(t0).Seconds())
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			if i == 0 {
				time.Sleep(3 * time.Second) // idle
				for _, n := range names {
					st, err := s.m.Stats(ctx, n)
					if err != nil {
						b.Fatal(err)
					}
					mem.add(float64(st.PrivateBytes) / 1e6)
				}
			}
			for _, n := range names {
				s.m.Destroy(ctx, n)
			}
		}
		r.report(b)
		addRow(r)
		addRow(mem)
	})

	table.Lock()
	defer table.Unlock()
	fmt.Fprintf(os.Stdout, "\n%-42s %5s %10s %10s %10s %10s\n", "figure", "n", "min", "median", "p95", "max")
	for _, row := range table.rows {
		lo, med, p95, hi := row.stats()
		fmt.Fprintf(os.Stdout, "%-42s %5d %10.2f %10.2f %10.2f %10.2f  %s\n", row.name, len(row.v), lo, med, p95, hi, row.unit)
	}
	table.rows = nil
}

// BenchmarkExecAB compares the exec round trip (`true`) of guest /init
// binaries on a shared, noisy machine: one box per variant, then each round
// runs one exec on every box in turn, so load changes hit all alike; then
// a 16 MiB copy out per 20 rounds, the same way.
// Variants come from SBX_BENCH_AB as for BenchmarkBootAB (name=vmlinux[:init]),
// e.g. an init built before and after a change to vm/agent:
//
//	SBX_BENCH_AB="old=.sbx/kernel/small/vmlinux:/tmp/old-init new=.sbx/kernel/small/vmlinux" \
//	  go test -run '^$' -bench ExecAB -benchtime 200x ./vm/qemu/
func BenchmarkExecAB(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		m          *vm.Manager
		exec, copy samples
	}
	var vs []*variant
	for _, a := range abVariants(ctx, b, "execs") {
		b.Cleanup(func() { a.m.Destroy(ctx, "ab") })
		startBox(ctx, b, a.m, "ab")
		vs = append(vs, &variant{m: a.m, exec: samples{name: a.name + " exec true", unit: "ms"},
			copy: samples{name: a.name + " copy out 16 MiB", unit: "MB/s"}})
	}
	for range b.N {
		for _, v := range vs {
			v.exec.add(ms(vmtest.ExecTrue(ctx, b, v.m, "ab")))
		}
	}
	// Then copy out, which shares the agent's framing with exec.
	const size = 16 << 20
	data := make([]byte, size)
	rand.Read(data)
	for _, v := range vs {
		if err := v.m.WriteFile(ctx, "ab", "copy.bin", 0o644, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	for range max(1, b.N/20) {
		for _, v := range vs {
			v.copy.add(copyOut(ctx, b, v.m, "ab", "copy.bin", size))
		}
	}
	b.ReportMetric(0, "ns/op")
	fmt.Printf("\n%-28s %5s %10s %10s %10s %10s\n", "variant", "n", "min", "median", "p95", "max")
	for _, v := range vs {
		for _, s := range []*samples{&v.exec, &v.copy} {
			lo, med, p95, hi := s.stats()
			fmt.Printf("%-28s %5d %10.2f %10.2f %10.2f %10.2f  %s\n", s.name, len(s.v), lo, med, p95, hi, s.unit)
		}
	}
}

// copyOut reads the file of size bytes out of box and returns MB/s.
func copyOut(ctx context.Context, b *testing.B, m *vm.Manager, box, path string, size int64) float64 {
	t0 := time.Now()
	rc, err := m.ReadFile(ctx, box, path)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || n != size {
		b.Fatalf("read %d bytes: %v", n, err)
	}
	return float64(size) / 1e6 / time.Since(t0).Seconds()
}
