package mcp

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkStatus measures the status tool on a real box through the whole
// stack (HTTP, auth with a SQLite key lookup, the SDK, the core, an audit
// row): per-call latency p50/p99 from one client, and from 50 concurrent
// clients. Run with -benchtime 1000x for the 1,000 calls.
func BenchmarkStatus(b *testing.B) {
	f := newFleetFront(b, Options{})
	tok, _ := f.token(b, "alice")
	setup := mustConnect(b, f.url, tok, stateful)
	run := out[RunOut](b, call(b, setup, "delegate", map[string]any{"task": "!say ready", "agent": "script"}))
	if run.State != "done" {
		b.Fatalf("delegate: %+v", run)
	}
	args := map[string]any{"box": run.Box}
	for _, mode := range []string{stateful, stateless} {
		for _, clients := range []int{1, 50} {
			b.Run(mode+"/clients="+strconv.Itoa(clients), func(b *testing.B) {
				sessions := make([]*sdk.ClientSession, clients)
				for i := range sessions {
					sessions[i] = mustConnect(b, f.url, tok, mode)
				}
				lat := make([]time.Duration, b.N)
				var next int64
				var mu sync.Mutex
				var wg sync.WaitGroup
				b.ResetTimer()
				for _, cs := range sessions {
					wg.Go(func() {
						for {
							mu.Lock()
							i := next
							next++
							mu.Unlock()
							if i >= int64(b.N) {
								return
							}
							start := time.Now()
							res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "status", Arguments: args})
							lat[i] = time.Since(start)
							if err != nil || res.IsError {
								b.Errorf("status: %v %v", err, res)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			})
		}
	}
}
