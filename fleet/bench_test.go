package fleet_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
)

// BenchmarkDelegateToFirstOutput measures delegate → the agent's first line
// in the log (script agent, Debian image, a repo cloned on the host and
// copied in), cold and from the warm pool: the median and p90 of 10
// delegations. The seed published 4.3 s with a warm pool and 8–10 s without.
//
//	go test -run XXX -bench DelegateToFirstOutput -benchtime 1x ./fleet
func BenchmarkDelegateToFirstOutput(b *testing.B) {
	for _, c := range []struct {
		name string
		pool int
	}{{"cold", 0}, {"warm-pool", 1}} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, fleet.Policy{WarmPool: c.pool})
			ctx := context.Background()
			var ds []time.Duration
			for range b.N {
				for i := 0; i < 10; i++ {
					if c.pool > 0 {
						waitPool(b, e, c.pool)
					}
					start := time.Now()
					box, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script", Task: "!say first line",
						Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}})
					if err != nil {
						b.Fatal(err)
					}
					waitFirst(b, e, box.Name)
					ds = append(ds, time.Since(start))
					if err := e.fleet.Destroy(ctx, e.alice, box.Name); err != nil {
						b.Fatal(err)
					}
				}
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), "median-ms")
			b.ReportMetric(float64(ds[len(ds)*9/10].Milliseconds()), "p90-ms")
			b.ReportMetric(float64(ds[0].Milliseconds()), "min-ms")
			for _, l := range strings.Split(e.logs.String(), "\n") {
				if strings.Contains(l, "box started") || strings.Contains(l, "msg=delegated") {
					b.Log(l)
				}
			}
			b.Logf("%s: n=%d median %v p90 %v min %v max %v", c.name, len(ds), ds[len(ds)/2], ds[len(ds)*9/10], ds[0], ds[len(ds)-1])
		})
	}
}

func waitPool(b *testing.B, e *env, n int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if p, _ := e.fleet.Pool(context.Background(), e.admin); p.Ready >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatal("warm pool never filled")
}

func waitFirst(b *testing.B, e *env, name string) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if strings.Contains(e.log(name), "first line") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatal("no first line")
}
