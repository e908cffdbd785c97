package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/qemu"
	"sbx.dev/sbx/vm/vmtest"
)

// benchManagers are a vm.Manager on the test cluster (a fresh namespace)
// and one on this machine's QEMU, for benchmarks that run the two side by
// side; both close when b ends.
func benchManagers(b *testing.B) (kubeM, qemuM *vm.Manager) {
	c := cluster(b)
	ns := c.namespace(b)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	kubeM, err := vm.New(ctx, vm.Config{Backend: c.backend(b, ns, nil), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kubeM.Close() })
	qb, err := qemu.New(ctx, qemu.Config{DataDir: testutil.DataDirWithImages(b, "../.."), Init: testutil.GuestBinary(b), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	qemuM, err = vm.New(ctx, vm.Config{Backend: qb, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { qemuM.Close() })
	return kubeM, qemuM
}

// BenchmarkCreateToExec measures box create → first exec answered on the
// test cluster (claim created and bound, Pod scheduled and started, agent
// reached through the exec bridge, `true` run) and, beside it in the same
// run, on the QEMU backend of this machine (workspace disk made, microVM
// booted with the small kernel, `true` run): the two alternate box by box,
// so load changes hit both alike. Reported as the median (and min/max) of
// b.N boxes each; run with -benchtime 10x (`go tool -modfile=tools/go.mod task bench-kube`).
func BenchmarkCreateToExec(b *testing.B) {
	ctx := context.Background()
	kubeM, qemuM := benchManagers(b)
	spec := vm.Spec{MemoryMiB: 256, WorkspaceMiB: 256}

	one := func(m *vm.Manager, name string) time.Duration {
		start := time.Now()
		if _, err := m.Create(ctx, name, spec); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Start(ctx, name); err != nil {
			b.Fatal(err)
		}
		vmtest.ExecTrue(ctx, b, m, name)
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

// BenchmarkEgress measures a box's one way out on the test cluster (a
// connection carried by the pod agent through an exec stream of the API
// server) beside a QEMU box's (slirp guestfwd spawning `sbx vm-fwd` per
// connection), both to the same unix-socket HTTP server on the host: the
// time per small request (20 sequential `wget`s in one exec, less an exec of
// the same loop doing nothing) and MB/s of a 32 MiB download. The two
// backends alternate round by round; run with -benchtime 5x.
func BenchmarkEgress(b *testing.B) {
	ctx := context.Background()
	kubeM, qemuM := benchManagers(b)
	sock := filepath.Join(b.TempDir(), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	big := make([]byte, 32<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(big)
			return
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	spec := vm.Spec{MemoryMiB: 256, WorkspaceMiB: 256, Egress: sock}
	for _, m := range []*vm.Manager{kubeM, qemuM} {
		if _, err := m.Create(ctx, "egress-bench", spec); err != nil {
			b.Fatal(err)
		}
		defer m.Destroy(ctx, "egress-bench")
		if _, err := m.Start(ctx, "egress-bench"); err != nil {
			b.Fatal(err)
		}
	}
	timed := func(m *vm.Manager, script string) time.Duration {
		start := time.Now()
		p, err := m.Exec(ctx, "egress-bench", agent.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil {
			b.Fatal(err)
		}
		p.Stdin().Close()
		go io.Copy(io.Discard, p.Stderr())
		out, _ := io.ReadAll(p.Stdout())
		if st, err := p.Wait(); err != nil || st.Code != 0 {
			b.Fatalf("%s: %+v %v %q", script, st, err, out)
		}
		return time.Since(start)
	}
	const n = 20
	loop := "for i in $(seq " + fmt.Sprint(n) + "); do %s; done"
	type result struct{ req, mbps []float64 }
	res := map[string]*result{"kube": {}, "qemu": {}}
	b.ResetTimer()
	for range b.N {
		for _, be := range []struct {
			name string
			m    *vm.Manager
		}{{"kube", kubeM}, {"qemu", qemuM}} {
			empty := timed(be.m, fmt.Sprintf(loop, "true"))
			reqs := timed(be.m, fmt.Sprintf(loop, "wget -q -O /dev/null http://"+vm.EgressHostname+"/small"))
			one := timed(be.m, "true")
			dl := timed(be.m, "wget -q -O /dev/null http://"+vm.EgressHostname+"/big")
			r := res[be.name]
			r.req = append(r.req, float64((reqs-empty).Microseconds())/1000/n)
			r.mbps = append(r.mbps, float64(len(big))/(1<<20)/(dl-one).Seconds())
		}
	}
	b.StopTimer()
	for name, r := range res {
		slices.Sort(r.req)
		slices.Sort(r.mbps)
		b.ReportMetric(r.req[len(r.req)/2], name+"-ms/request")
		b.ReportMetric(r.mbps[len(r.mbps)/2], name+"-MB/s")
		b.Logf("%s: ms per request %v, MB/s %v", name, r.req, r.mbps)
	}
	b.ReportMetric(0, "ns/op")
}
