package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/qemu"
)

// BenchmarkCreateToExec measures box create → first exec answered on the
// test cluster (claim created and bound, Pod scheduled and started, agent
// reached through the exec bridge, `true` run) and, beside it in the same
// run, on the QEMU backend of this machine (workspace disk made, microVM
// booted with the small kernel, `true` run): the two alternate box by box,
// so load changes hit both alike. Reported as the median (and min/max) of
// b.N boxes each; run with -benchtime 10x (`go tool task bench-kube`).
func BenchmarkCreateToExec(b *testing.B) {
	c := cluster(b)
	ns := c.namespace(b)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	kubeM, err := vm.New(ctx, vm.Config{Backend: c.backend(b, ns, nil), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer kubeM.Close()
	qb, err := qemu.New(ctx, qemu.Config{DataDir: testutil.DataDirWithImages(b, "../.."), Init: testutil.GuestBinary(b), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	qemuM, err := vm.New(ctx, vm.Config{Backend: qb, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer qemuM.Close()
	spec := vm.Spec{MemoryMiB: 256, WorkspaceMiB: 256}

	one := func(m *vm.Manager, name string) time.Duration {
		start := time.Now()
		if _, err := m.Create(ctx, name, spec); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Start(ctx, name); err != nil {
			b.Fatal(err)
		}
		p, err := m.Exec(ctx, name, agent.ExecRequest{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		p.Stdin().Close()
		go io.Copy(io.Discard, p.Stdout())
		go io.Copy(io.Discard, p.Stderr())
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("true: %+v %v", st, err)
		}
		d := time.Since(start)
		if err := m.Destroy(ctx, name); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var kube, local []time.Duration
	b.ResetTimer()
	for i := range b.N {
		kube = append(kube, one(kubeM, fmt.Sprintf("bench-%d", i)))
		local = append(local, one(qemuM, fmt.Sprintf("bench-%d", i)))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"kube", kube}, {"qemu", local}} {
		slices.Sort(r.ds)
		b.ReportMetric(ms(r.ds[len(r.ds)/2]), r.name+"-ms-median")
		b.ReportMetric(ms(r.ds[0]), r.name+"-ms-min")
		b.ReportMetric(ms(r.ds[len(r.ds)-1]), r.name+"-ms-max")
		b.Logf("%s: create → exec ready over %d boxes: %v", r.name, len(r.ds), r.ds)
	}
	b.ReportMetric(0, "ns/op")
}
