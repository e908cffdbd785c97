package boxnet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/netpolicy"
)

// curl runs the real curl through the proxy at proxy and returns the body,
// the HTTP status curl saw ("000" when none) and curl's error.
func curl(t *testing.T, proxy, target string, extra ...string) (body, status string, err error) {
	t.Helper()
	if _, lerr := exec.LookPath("curl"); lerr != nil {
		t.Fatalf("curl is required (apt-get install curl): %v", lerr)
	}
	args := append([]string{"-sS", "-k", "--max-time", "30", "--noproxy", "", "-x", "http://" + proxy, "-w", "\n%{http_code}", target}, extra...)
	cmd := exec.Command("curl", args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	out := stdout.String()
	i := strings.LastIndexByte(out, '\n')
	if err != nil {
		err = fmt.Errorf("curl %s: %w: %s", target, err, strings.TrimSpace(stderr.String()))
	}
	return out[:i], out[i+1:], err
}

// upstreams starts a TLS and a plain HTTP server on loopback and returns
// their ports.
func upstreams(t *testing.T) (tlsPort, plainPort string) {
	t.Helper()
	h := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s host=%s auth=%q", name, r.Host, r.Header.Get("Proxy-Authorization"))
		}
	}
	ts := httptest.NewTLSServer(h("tls"))
	t.Cleanup(ts.Close)
	ps := httptest.NewServer(h("plain"))
	t.Cleanup(ps.Close)
	return portOfURL(t, ts.URL), portOfURL(t, ps.URL)
}

func portOfURL(t *testing.T, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

var lo = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// An allowed name passes (CONNECT and plain HTTP) on the port its entry
// opens; a name off the list, a wildcard's own apex and an address literal
// are refused, each with an audit decision, and a refused name is never
// even resolved.
func TestEgressAllowList(t *testing.T) {
	tlsPort, plainPort := upstreams(t)
	pol := newPolicy()
	pol.set("b1", BoxPolicy{AllowDomains: []string{"allowed.test:" + tlsPort, "*.wild.test:" + plainPort}})
	res := &mapResolver{names: map[string][]netip.Addr{
		"allowed.test": lo, "a.wild.test": lo, "wild.test": lo, "denied.test": lo,
	}}
	s := newTestServer(Config{Policy: pol, Resolver: res, EgressTrust: netpolicy.LoopbackTrust()})
	proxy := serveBox(t, s, "b1")

	body, status, err := curl(t, proxy, "https://allowed.test:"+tlsPort+"/x")
	if err != nil || status != "200" || !strings.HasPrefix(body, "hello from tls host=allowed.test:"+tlsPort) {
		t.Fatalf("CONNECT to an allowed name: %v %s %q", err, status, body)
	}
	if d := pol.lastDecision(t, "allowed.test"); d.Verdict != Allow || d.Box != "b1" || d.Addr != "127.0.0.1" || d.Detail != "CONNECT" || fmt.Sprint(d.Port) != tlsPort {
		t.Fatalf("decision = %+v", d)
	}
	body, status, err = curl(t, proxy, "http://a.wild.test:"+plainPort+"/y", "-H", "Proxy-Authorization: Basic Zm9vOmJhcg==")
	if err != nil || status != "200" || !strings.HasPrefix(body, "hello from plain host=a.wild.test:"+plainPort+` auth=""`) {
		t.Fatalf("plain HTTP to a wildcard name: %v %s %q", err, status, body)
	}
	if d := pol.lastDecision(t, "a.wild.test"); d.Verdict != Allow || d.Detail != "GET" {
		t.Fatalf("decision = %+v", d)
	}

	for _, tc := range []struct{ target, host, reason string }{
		{"https://denied.test:" + tlsPort + "/", "denied.test", "allow-list"},
		{"https://wild.test:" + tlsPort + "/", "wild.test", "allow-list"},
		{"http://denied.test:" + plainPort + "/", "denied.test", "allow-list"},
		{"https://127.0.0.1:" + tlsPort + "/", "127.0.0.1", "allow-list"},
	} {
		_, status, err := curl(t, proxy, tc.target)
		if err == nil && status == "200" {
			t.Fatalf("%s passed", tc.target)
		}
		if d := pol.lastDecision(t, tc.host); d.Verdict != Deny || !strings.Contains(d.Reason, tc.reason) {
			t.Fatalf("%s: decision %+v", tc.target, d)
		}
	}
	if res.looked("denied.test") || res.looked("wild.test") {
		t.Fatal("a name off the allow-list was resolved")
	}
}

// Without the test hook, even in open mode, a name resolving to a loopback,
// private or link-local address is refused after resolution, as are address
// literals in any spelling. (The allow-list opens the test servers' ports,
// so only the address stands in the way.)
func TestEgressForbiddenAddresses(t *testing.T) {
	tlsPort, plainPort := upstreams(t)
	pol := newPolicy()
	var ports []string
	for _, h := range []string{"lo.test", "127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"} {
		ports = append(ports, h+":"+tlsPort, h+":"+plainPort)
	}
	pol.set("b2", BoxPolicy{Open: true, AllowDomains: ports})
	res := &mapResolver{names: map[string][]netip.Addr{
		"lo.test":    lo,
		"ten.test":   {netip.MustParseAddr("10.0.0.5")},
		"v6lo.test":  {netip.MustParseAddr("::1")},
		"meta.test":  {netip.MustParseAddr("169.254.169.254")},
		"mixed.test": {netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("127.0.0.1")},
		"nat64.test": {netip.MustParseAddr("64:ff9b::7f00:1")},
	}}
	s := newTestServer(Config{Policy: pol, Resolver: res})
	proxy := serveBox(t, s, "b2")
	for _, tc := range []struct{ target, host, reason string }{
		{"https://lo.test:" + tlsPort + "/", "lo.test", "loopback"},
		{"http://lo.test:" + plainPort + "/", "lo.test", "loopback"},
		{"https://ten.test/", "ten.test", "RFC 1918"},
		{"https://v6lo.test/", "v6lo.test", "reserved IPv6"},
		{"https://meta.test/", "meta.test", "metadata"},
		{"https://mixed.test/", "mixed.test", "loopback"},
		{"https://nat64.test/", "nat64.test", "NAT64 of 127.0.0.1"},
		{"https://127.0.0.1:" + tlsPort + "/", "127.0.0.1", "loopback"},
		{"http://127.0.0.1:" + plainPort + "/", "127.0.0.1", "loopback"},
		{"https://10.1.2.3/", "10.1.2.3", "RFC 1918"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254", "metadata"},
		{"https://[::1]:" + tlsPort + "/", "::1", "reserved IPv6"},
		{"https://[::ffff:127.0.0.1]:" + tlsPort + "/", "::ffff:127.0.0.1", "loopback"},
		{"https://[fd00::1]/", "fd00::1", "unique local"},
		{"https://[fe80::1]/", "fe80::1", "link-local"},
		{"https://100.100.100.200/", "100.100.100.200", "CGNAT"},
		{"https://0.0.0.0:" + tlsPort + "/", "0.0.0.0", "this-network"},
		{"https://" + GatewayHost + "/", GatewayHost, "RFC 1918"},
		{"https://nosuch.test/", "nosuch.test", "cannot resolve"},
	} {
		body, status, err := curl(t, proxy, tc.target)
		if err == nil && status == "200" {
			t.Fatalf("%s passed: %q", tc.target, body)
		}
		if d := pol.lastDecision(t, tc.host); d.Verdict != Deny || d.Box != "b2" || !strings.Contains(d.Reason, tc.reason) {
			t.Fatalf("%s: decision %+v, want deny for %q", tc.target, d, tc.reason)
		}
	}
	if n := len(pol.audited(KindEgress)); n != 19 {
		t.Fatalf("%d egress decisions, want one per request", n)
	}
	// Plain HTTP to the gateway's own address is the gateway, not egress.
	body, status, err := curl(t, proxy, "http://"+GatewayHost+":8080/nothing")
	if err != nil || status != "404" || !strings.Contains(body, "sbx gateway: unknown endpoint") {
		t.Fatalf("gateway address through the proxy: %v %s %q", err, status, body)
	}
}

// rebindResolver answers a loopback address first and an unroutable one
// afterwards: a proxy that resolved twice would dial the second.
type rebindResolver struct{ n int }

func (r *rebindResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.n++
	if r.n == 1 {
		return lo, nil
	}
	return []netip.Addr{netip.MustParseAddr("192.0.2.1")}, nil
}

// The proxy dials the address it checked: one lookup per request, and the
// connection goes where the checked answer pointed.
func TestEgressDialsTheCheckedAddress(t *testing.T) {
	_, plainPort := upstreams(t)
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"rebind.test:" + plainPort}})
	res := &rebindResolver{}
	s := newTestServer(Config{Policy: pol, Resolver: res, EgressTrust: netpolicy.LoopbackTrust()})
	proxy := serveBox(t, s, "b")
	body, status, err := curl(t, proxy, "http://rebind.test:"+plainPort+"/")
	if err != nil || status != "200" || !strings.HasPrefix(body, "hello from plain") {
		t.Fatalf("%v %s %q", err, status, body)
	}
	if res.n != 1 {
		t.Fatalf("%d lookups, want 1", res.n)
	}
}

// connectRaw opens a CONNECT tunnel by hand and returns the connection and
// the proxy's status line.
func connectRaw(t *testing.T, proxy, target string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "\r\n" {
			break
		}
	}
	return c, br, strings.TrimSpace(line)
}

// A box has a bounded number of tunnels; a freed slot is reusable; an idle
// tunnel is closed.
func TestEgressTunnelLimitAndIdle(t *testing.T) {
	_, plainPort := upstreams(t)
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"allowed.test:" + plainPort}})
	res := &mapResolver{names: map[string][]netip.Addr{"allowed.test": lo}}
	s := newTestServer(Config{Policy: pol, Resolver: res, EgressTrust: netpolicy.LoopbackTrust(), MaxTunnels: 1, IdleTimeout: 300 * time.Millisecond})
	proxy := serveBox(t, s, "b")
	target := "allowed.test:" + plainPort

	c1, br, status := connectRaw(t, proxy, target)
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("first tunnel: %q", status)
	}
	// The tunnel works: an HTTP request through it.
	fmt.Fprintf(c1, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, int64(len("hello from plain"))))
	if string(b) != "hello from plain" {
		t.Fatalf("through the tunnel: %q", b)
	}

	c2, _, status := connectRaw(t, proxy, target)
	c2.Close()
	if !strings.Contains(status, " 429 ") {
		t.Fatalf("second tunnel while the first is open: %q", status)
	}
	if d := pol.audited(KindEgress); d[len(d)-1].Verdict != Deny || !strings.Contains(d[len(d)-1].Reason, "too many") {
		t.Fatalf("decision = %+v", d[len(d)-1])
	}

	// Left idle, the first tunnel is closed by the proxy.
	_ = c1.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatalf("idle tunnel not closed: %v", err)
	}
	c1.Close()

	// Its slot comes back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c3, _, status := connectRaw(t, proxy, target)
		c3.Close()
		if strings.Contains(status, " 200 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never freed: %q", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkEgressDecision is one allow-list decision with resolution.
func BenchmarkEgressDecision(b *testing.B) {
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"a.test", "*.github.com", "pypi.org", "*.npmjs.org"}})
	res := &mapResolver{names: map[string][]netip.Addr{"api.github.com": {netip.MustParseAddr("140.82.112.6"), netip.MustParseAddr("2606:50c0:8000::64")}}}
	s := newTestServer(Config{Policy: pol, Resolver: res})
	ctx := context.Background()
	for b.Loop() {
		if v := s.decideEgress(ctx, "b", "API.github.com.", 443); !v.ok {
			b.Fatal(v.reason)
		}
		res.lookups = res.lookups[:0]
	}
}

// BenchmarkTunnel is bulk throughput through one CONNECT tunnel to a
// loopback sink (the box side of a large download, reversed).
func BenchmarkTunnel(b *testing.B) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	_, port, _ := net.SplitHostPort(sink.Addr().String())
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"sink.test:" + port}})
	s := newTestServer(Config{Policy: pol, Resolver: &mapResolver{names: map[string][]netip.Addr{"sink.test": lo}}, EgressTrust: netpolicy.LoopbackTrust()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, "b", ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT sink.test:%s HTTP/1.1\r\nHost: sink.test\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", err, resp)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// Over the production transport (a unix socket), a tunnel passes each
// side's end of stream on without cutting the other direction: the upstream
// says hello and half-closes; the client reads to EOF, then still sends.
// Regression: the connection-limit wrapper hid the unix socket's CloseWrite,
// so the upstream's EOF closed the box's connection whole.
func TestEgressUnixSocketHalfClose(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	received := make(chan string, 1)
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "hello from upstream")
		c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(c)
		received <- string(b)
	}()
	_, port, _ := net.SplitHostPort(up.Addr().String())
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"up.test:" + port}})
	s := newTestServer(Config{Policy: pol, Resolver: &mapResolver{names: map[string][]netip.Addr{"up.test": lo}}, EgressTrust: netpolicy.LoopbackTrust()})
	sock := filepath.Join(t.TempDir(), "b.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, "b", ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT up.test:%s HTTP/1.1\r\nHost: up.test\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", err, resp)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "hello from upstream" {
		t.Fatalf("greeting %q %v", got, err)
	}
	if _, err := io.WriteString(c, "hello from the box"); err != nil {
		t.Fatalf("write after the upstream's EOF: %v", err)
	}
	c.(*net.UnixConn).CloseWrite()
	select {
	case b := <-received:
		if b != "hello from the box" {
			t.Fatalf("upstream received %q", b)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("upstream never got the box's data")
	}
}
