package kube

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// BenchmarkCreateToExec measures box create → first exec answered on the
// test cluster: claim created and bound, Pod scheduled and started, agent
// reached through the exec bridge, `true` run. Reported as the median (and
// min/max) of b.N boxes; run with -benchtime 10x (`go tool task bench-kube`).
func BenchmarkCreateToExec(b *testing.B) {
	c := cluster(b)
	ns := c.namespace(b)
	ctx := context.Background()
	m, err := vm.New(ctx, vm.Config{Backend: c.backend(b, ns, nil)})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var ds []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if _, err := m.Create(ctx, name, vm.Spec{}); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Start(ctx, name); err != nil {
			b.Fatal(err)
		}
		p, err := m.Exec(ctx, name, agent.ExecRequest{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		go io.Copy(io.Discard, p.Stdout())
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("true: %+v %v", st, err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := m.Destroy(ctx, name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(ds[len(ds)/2]), "ms-median")
	b.ReportMetric(ms(ds[0]), "ms-min")
	b.ReportMetric(ms(ds[len(ds)-1]), "ms-max")
	b.ReportMetric(0, "ns/op")
	b.Logf("create → exec ready over %d boxes: %v", len(ds), ds)
}
