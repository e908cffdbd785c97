package web

import (
	"bufio"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// percentile of sorted durations.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkFleetPage100 renders the fleet page of 100 boxes for a logged-in
// browser under a loopback load generator of 8 concurrent clients: session
// lookup in SQLite, the core's list, templ render. Reports p50/p99.
func BenchmarkFleetPage100(b *testing.B) {
	c := newConsole(b, Options{})
	now := time.Now()
	for i := range 100 {
		c.core.add(fmt.Sprintf("box-%03d", i), "alice", fmt.Sprintf("task %d: fix the flaky test in pkg/%d and explain why it failed", i, i),
			"acme/widget", now.Add(-time.Duration(i)*time.Minute))
	}
	cl := c.login("alice")
	const workers = 8
	var mu sync.Mutex
	var lat []time.Duration
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var mine []time.Duration
			for range jobs {
				start := time.Now()
				resp, err := cl.Get(c.URL + "/")
				if err != nil {
					b.Error(err)
					continue
				}
				n := 0
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					n += strings.Count(sc.Text(), `<tr id="box-`)
				}
				resp.Body.Close()
				mine = append(mine, time.Since(start))
				if resp.StatusCode != 200 || n != 100 {
					b.Errorf("fleet page: %d with %d rows", resp.StatusCode, n)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	b.ResetTimer()
	for b.Loop() {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkSSEFanout500 streams one box's log to 500 logged-in browsers
// (500 SSE connections on loopback) and measures, per written line, the
// delay until each subscriber has read it: p50/p99 delivery latency, and
// the gateway's heap per subscriber. The log comes from the scripted
// core's stream; the console's part (session check, one Logs and one
// Events subscription per browser, escaping, flushing) is the real one.
func BenchmarkSSEFanout500(b *testing.B) {
	const subscribers = 500
	c := newConsole(b, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	cl := c.login("alice")
	cl.Transport = &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: subscribers}
	u := c.URL + "/boxes/b1/stream"

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	type got struct {
		seq int
		lat time.Duration
	}
	results := make(chan got, subscribers*4)
	ready := make(chan struct{}, subscribers)
	var bodies []func() error
	for range subscribers {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := cl.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("subscribe: %v %v", err, resp)
		}
		bodies = append(bodies, resp.Body.Close)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Text()
				rest, ok := strings.CutPrefix(line, "data: tick ")
				if !ok {
					continue
				}
				f := strings.Fields(rest)
				seq, _ := strconv.Atoi(f[0])
				sent, _ := strconv.ParseInt(f[1], 10, 64)
				if seq < 0 {
					ready <- struct{}{}
					continue
				}
				results <- got{seq, time.Since(time.Unix(0, sent))}
			}
		}()
	}
	defer func() {
		for _, cl := range bodies {
			cl()
		}
	}()
	// A warm-up line proves every stream is live before timing starts.
	c.core.write("b1", fmt.Sprintf("tick -1 %d\n", time.Now().UnixNano()))
	for range subscribers {
		<-ready
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	var lat []time.Duration
	b.ResetTimer()
	seq := 0
	for b.Loop() {
		c.core.write("b1", fmt.Sprintf("tick %d %d\n", seq, time.Now().UnixNano()))
		for range subscribers {
			r := <-results
			lat = append(lat, r.lat)
		}
		seq++
	}
	b.StopTimer()
	reportLatency(b, lat)
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/subscribers/1024, "heap-KiB/sub")
	b.ReportMetric(float64(after.NumGC-before.NumGC), "gc")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
}
