package qemu

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/kernel"
	"sbx.dev/sbx/vm/vmtest"
)

// BenchmarkBootAB compares guest kernels and /init binaries side by side on
// a shared, noisy machine: the variants boot in turn, so load changes hit
// them alike. Variants come from SBX_BENCH_AB, space separated
// name=vmlinux[:init] (init defaults to the test init), e.g.
//
//	SBX_BENCH_AB="old=.sbx/kernel/small/vmlinux new=/tmp/k/vmlinux full=.sbx/kernel/small/vmlinux:/tmp/sbx" \
//	  go test -run '^$' -bench BootAB -benchtime 20x ./vm/qemu/
//
// For each variant: cold boot to first agent reply, the median of 5 exec
// round trips (`true`) per box, and for the first 3 boxes the private
// memory after 3 s idle (before the execs).
func BenchmarkBootAB(b *testing.B) {
	type variant struct {
		name            string
		m               *vm.Manager
		boot, exec, mem samples
	}
	ctx := context.Background()
	var vs []*variant
	for _, a := range abVariants(ctx, b, "boots") {
		vs = append(vs, &variant{name: a.name, m: a.m,
			boot: samples{name: a.name + " cold boot", unit: "ms"}, exec: samples{name: a.name + " exec true", unit: "ms"},
			mem: samples{name: a.name + " idle private mem", unit: "MB"}})
	}
	for i := range b.N {
		for _, v := range vs {
			name := fmt.Sprintf("ab-%d", i)
			v.boot.add(ms(startBox(ctx, b, v.m, name)))
			if i < 3 { // as BenchmarkVM: after 3 s idle, before any exec
				time.Sleep(3 * time.Second)
				st, err := v.m.Stats(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				v.mem.add(float64(st.PrivateBytes) / 1e6)
			}
			var ex samples
			for range 5 {
				ex.add(ms(vmtest.ExecTrue(ctx, b, v.m, name)))
			}
			_, med, _, _ := ex.stats()
			v.exec.add(med)
			if err := v.m.Destroy(ctx, name); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	fmt.Printf("\n%-28s %5s %10s %10s %10s %10s\n", "variant", "n", "min", "median", "p95", "max")
	for _, v := range vs {
		for _, s := range []*samples{&v.boot, &v.exec, &v.mem} {
			lo, med, p95, hi := s.stats()
			fmt.Printf("%-28s %5d %10.2f %10.2f %10.2f %10.2f  %s\n", s.name, len(s.v), lo, med, p95, hi, s.unit)
		}
	}
}

// abVariant is one guest of SBX_BENCH_AB: a vm.Manager booting its kernel
// and init.
type abVariant struct {
	name string
	m    *vm.Manager
}

// abVariants reads SBX_BENCH_AB (space separated name=vmlinux[:init]; init
// defaults to the test init, a kernel under /boot/ is the stock one with its
// modules) and makes a manager per variant, closed when b ends; it skips b
// when the variable is unset, saying what it would compare.
func abVariants(ctx context.Context, b *testing.B, what string) []abVariant {
	spec := os.Getenv("SBX_BENCH_AB")
	if spec == "" {
		b.Skip("set SBX_BENCH_AB to name=vmlinux[:init] ... to compare " + what)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var out []abVariant
	for _, f := range strings.Fields(spec) {
		name, rest, ok := strings.Cut(f, "=")
		if !ok {
			b.Fatalf("SBX_BENCH_AB: %q is not name=vmlinux[:init]", f)
		}
		kpath, init, _ := strings.Cut(rest, ":")
		if init == "" {
			init = testInit(b)
		}
		k := kernel.Kernel{Kind: kernel.KindSmall, Path: kpath}
		if strings.Contains(kpath, "/boot/") {
			var err error
			if k, err = kernel.Stock(b.TempDir()); err != nil {
				b.Fatal(err)
			}
		}
		be, err := New(ctx, Config{DataDir: b.TempDir(), Kernel: &k, Init: init, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		m, err := vm.New(ctx, vm.Config{Backend: be, BootTimeout: 5 * time.Minute, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		out = append(out, abVariant{name: name, m: m})
	}
	return out
}
