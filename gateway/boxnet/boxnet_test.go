package boxnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/netpolicy"
)

// testPolicy is an in-memory Policy: what the core will keep in its store.
type testPolicy struct {
	mu        sync.Mutex
	boxes     map[string]BoxPolicy
	decisions []Decision
}

func newPolicy() *testPolicy { return &testPolicy{boxes: map[string]BoxPolicy{}} }

func (p *testPolicy) set(box string, bp BoxPolicy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.boxes[box] = bp
}

func (p *testPolicy) Box(_ context.Context, box string) (BoxPolicy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	bp, ok := p.boxes[box]
	if !ok {
		return BoxPolicy{}, fmt.Errorf("no box %q", box)
	}
	if bp.Model != nil {
		m := *bp.Model
		bp.Model = &m
	}
	return bp, nil
}

func (p *testPolicy) Audit(_ context.Context, d Decision) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.decisions = append(p.decisions, d)
}

func (p *testPolicy) Spend(_ context.Context, box string, u Usage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	bp := p.boxes[box]
	if bp.Model == nil {
		return errors.New("no model route")
	}
	m := *bp.Model
	m.Used.Requests += u.Requests
	m.Used.InputTokens += u.InputTokens
	m.Used.OutputTokens += u.OutputTokens
	bp.Model = &m
	p.boxes[box] = bp
	return nil
}

func (p *testPolicy) used(box string) Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.boxes[box].Model.Used
}

// audited returns the decisions so far (of one kind, when kind != "").
func (p *testPolicy) audited(kind string) []Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Decision
	for _, d := range p.decisions {
		if kind == "" || d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// lastDecision returns the last decision about host.
func (p *testPolicy) lastDecision(t *testing.T, host string) Decision {
	t.Helper()
	ds := p.audited("")
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].Host == host {
			return ds[i]
		}
	}
	t.Fatalf("no decision about %q in %+v", host, ds)
	return Decision{}
}

// mapResolver resolves test names from a table and counts lookups.
type mapResolver struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	lookups []string
}

func (r *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups = append(r.lookups, host)
	a, ok := r.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(a), nil
}

func (r *mapResolver) looked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.lookups, host)
}

// serveBox serves box on a fresh loopback TCP listener (production uses the
// box's unix socket) and returns its address.
func serveBox(t *testing.T, s *Server, box string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, box, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve(%s): %v", box, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve(%s) did not return after cancel", box)
		}
	})
	return ln.Addr().String()
}

// trust lists a test's loopback upstreams (their URLs or host:port) as
// trusted private upstreams, as an operator does with net.private_upstreams:
// without it the git, model and MCP endpoints refuse them.
func trust(t testing.TB, upstreams ...string) []netpolicy.Trust {
	t.Helper()
	var out []netpolicy.Trust
	for _, s := range upstreams {
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			s = u.Host
		}
		tr, err := netpolicy.ParseTrust(s)
		if err != nil {
			t.Fatalf("trust %q: %v", s, err)
		}
		out = append(out, tr)
	}
	return out
}

// newTestServer is New with a discarding logger unless the test sets one.
func newTestServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return New(cfg)
}

// A box holds at most MaxConns connections to the gateway; the next one is
// accepted when one closes.
func TestServeConnectionCap(t *testing.T) {
	pol := newPolicy()
	pol.set("b", BoxPolicy{})
	s := newTestServer(Config{Policy: pol, MaxConns: 1})
	addr := serveBox(t, s, "b")
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// c1 is accepted once the server answers on it.
	fmt.Fprintf(c1, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c1), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/nothing")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-done:
		t.Fatal("a second connection was served while the first was open")
	case <-time.After(300 * time.Millisecond):
	}
	c1.Close()
	select {
	case code := <-done:
		if code != http.StatusNotFound {
			t.Fatalf("second connection: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the second connection was never served")
	}
}
