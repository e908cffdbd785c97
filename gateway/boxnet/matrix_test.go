package boxnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"sbx.dev/sbx/internal/netpolicy"
)

// The public addresses the fixture's names resolve to. No packet goes to
// them: the recording dialer routes them to local servers.
var (
	okAddr    = netip.MustParseAddr("93.184.215.14")
	redirAddr = netip.MustParseAddr("93.184.215.15")
)

// dialRecorder is Config.Dial for tests: it records every address the
// server dials and connects to loopback only. An address in routes goes to
// the local server it names, a loopback address as is; anything else fails
// without a packet sent.
type dialRecorder struct {
	mu     sync.Mutex
	dialed []string
	routes map[string]string
}

func (d *dialRecorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	to, ok := d.routes[addr]
	d.mu.Unlock()
	if !ok {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().Unmap().IsLoopback() {
			return nil, fmt.Errorf("test dialer: no route to %s (only loopback receives traffic in tests)", addr)
		}
		to = addr
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

// take returns the dials since the last take.
func (d *dialRecorder) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dialed
	d.dialed = nil
	return out
}

// netFixture is one Server with two boxes, "a" and "b", served on loopback
// listeners, the names of the test resolved by a table, every dial recorded.
// Upstreams: ok answers 200 to anything, redir answers 302 to the trap,
// and the trap (a loopback port nothing may reach) counts what reaches it.
type netFixture struct {
	t        *testing.T
	s        *Server
	pol      *testPolicy
	res      *mapResolver
	dials    *dialRecorder
	boxA     string // host:port of box a's listener
	boxB     string
	okPort   int // the ok server's loopback port, a trusted private upstream
	trapPort int
	trapHits atomic.Int64
}

func newNetFixture(t *testing.T) *netFixture {
	t.Helper()
	f := &netFixture{t: t, pol: newPolicy()}
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from ok %s", r.URL.Path)
	}))
	t.Cleanup(ok.Close)
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.trapHits.Add(1)
		io.WriteString(w, "trapped")
	}))
	t.Cleanup(trap.Close)
	f.okPort, f.trapPort = tcpPort(t, ok.Listener), tcpPort(t, trap.Listener)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:"+strconv.Itoa(f.trapPort)+"/stolen", http.StatusFound)
	}))
	t.Cleanup(redir.Close)
	f.dials = &dialRecorder{routes: map[string]string{}}
	for _, p := range []string{"80", "443", "8443"} {
		f.dials.routes[net.JoinHostPort(okAddr.String(), p)] = ok.Listener.Addr().String()
		f.dials.routes[net.JoinHostPort(redirAddr.String(), p)] = redir.Listener.Addr().String()
	}
	f.res = &mapResolver{names: map[string][]netip.Addr{
		"ok.test": {okAddr}, "b-only.test": {okAddr}, "redir.test": {redirAddr},
		"alt.test": {okAddr}, "x.wild.test": {okAddr}, "wild.test": {okAddr}, "any.test": {okAddr},
	}}
	f.s = newTestServer(Config{Policy: f.pol, Resolver: f.res, Dial: f.dials.dial,
		PrivateUpstreams: trust(t, "127.0.0.1:"+strconv.Itoa(f.okPort))})
	b := f.policyFor("b-only.test")
	b.MCP = map[string]MCPRoute{"b-tools": b.MCP["tools"]}
	f.pol.set("b", b)
	f.boxA, f.boxB = serveBox(t, f.s, "a"), serveBox(t, f.s, "b")
	return f
}

func tcpPort(t *testing.T, ln net.Listener) int {
	t.Helper()
	return ln.Addr().(*net.TCPAddr).Port
}

// policyFor is a box policy whose every destination is dest (a URL host,
// with or without a port): the allow-list names it, and the delegated repo
// acme/widget, the model and the MCP server "tools" are served from it.
func (f *netFixture) policyFor(dest string) BoxPolicy {
	up := "http://" + dest
	return BoxPolicy{
		AllowDomains: []string{dest},
		Repos:        map[string]GitRoute{"acme/widget": {Upstream: mustURL(f.t, up+"/acme/widget.git")}},
		Model:        &ModelRoute{Upstream: mustURL(f.t, up), APIKey: "sk-ant-real"},
		MCP:          map[string]MCPRoute{"tools": {URL: mustURL(f.t, up+"/mcp")}},
	}
}

// connectStatus sends CONNECT target through box's listener and returns
// the status code.
func (f *netFixture) connectStatus(box, target string) int {
	f.t.Helper()
	c, _, status := connectRaw(f.t, box, target)
	c.Close()
	fields := strings.Fields(status)
	if len(fields) < 2 {
		f.t.Fatalf("CONNECT %s: status line %q", target, status)
	}
	code, _ := strconv.Atoi(fields[1])
	return code
}

// do sends a request through box's listener (as a proxy when the URL is
// absolute and not the gateway's) and returns the status and body. It
// never follows a redirect.
func (f *netFixture) do(box, method, target string) (int, string) {
	f.t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	if strings.HasPrefix(target, "/") {
		target = "http://" + box + target
	} else {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: box})
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// withPort gives a URL host a port unless it has one.
func withPort(dest string, port int) string {
	if _, _, err := net.SplitHostPort(dest); err == nil {
		return dest
	}
	return net.JoinHostPort(strings.Trim(dest, "[]"), strconv.Itoa(port))
}

// urlHost writes an address as a URL host ([v6]).
func urlHost(a netip.Addr) string {
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// call makes one request of an endpoint from box a against the
// destination dest (what box a's policy points at).
type call func(f *netFixture, dest string) (int, string)

// matrixCalls are the requests a box makes of each endpoint.
func matrixCalls() map[string]call {
	return map[string]call{
		endpointConnect: func(f *netFixture, dest string) (int, string) {
			return f.connectStatus(f.boxA, withPort(dest, 443)), ""
		},
		endpointProxy: func(f *netFixture, dest string) (int, string) {
			return f.do(f.boxA, http.MethodGet, "http://"+dest+"/x")
		},
		endpointGit: func(f *netFixture, _ string) (int, string) {
			return f.do(f.boxA, http.MethodGet, "/git/a/acme/widget.git/info/refs?service=git-upload-pack")
		},
		endpointModel: func(f *netFixture, _ string) (int, string) {
			return f.do(f.boxA, http.MethodPost, "/model/v1/messages")
		},
		endpointMCP: func(f *netFixture, _ string) (int, string) {
			return f.do(f.boxA, http.MethodPost, "/mcp/tools")
		},
	}
}

// otherBoxCalls name, from box a, what is box b's: b's machine name in the
// git path, b's MCP server, a host only b's allow-list has. The model
// endpoint names nothing (the listener is the box), so it has no such row.
func otherBoxCalls() map[string]call {
	return map[string]call{
		endpointConnect: func(f *netFixture, _ string) (int, string) { return f.connectStatus(f.boxA, "b-only.test:443"), "" },
		endpointProxy: func(f *netFixture, _ string) (int, string) {
			return f.do(f.boxA, http.MethodGet, "http://b-only.test/x")
		},
		endpointGit: func(f *netFixture, _ string) (int, string) {
			return f.do(f.boxA, http.MethodGet, "/git/b/acme/widget.git/info/refs?service=git-upload-pack")
		},
		endpointMCP: func(f *netFixture, _ string) (int, string) { return f.do(f.boxA, http.MethodPost, "/mcp/b-tools") },
	}
}

// forbiddenAddrs is an address in every range no request may reach on a
// box's behalf.
func forbiddenAddrs() []string {
	return []string{
		"127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.254", "172.16.0.1", "172.31.255.254",
		"192.168.0.1", "192.168.255.254", "169.254.0.1", "169.254.169.254", "100.64.0.1", "100.127.255.254",
		"0.0.0.0", "::1", "::", "fc00::1", "fd00:ec2::254", "fe80::1", "fe80::a9fe:a9fe",
		"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1",
	}
}

// matrixCase is one row: a destination for box a and what each endpoint
// must answer (0: not applicable, with why in na).
type matrixCase struct {
	name   string
	dest   string // the URL host box a's policy points at
	calls  map[string]call
	status map[string]int
	na     string
	// dials are the only addresses the row may dial; reason is what the
	// refusal's audit line says (for every refused endpoint).
	dials  []string
	reason string
	// unaudited are the endpoints that answer without a decision (the
	// gateway serving itself).
	unaudited []string
}

// TestBoxEndpointMatrix: every endpoint a box reaches on 10.0.2.100:80
// (the list the handler dispatches on) × its own box, another box's names,
// an upstream in every forbidden range (as an address and as a name that
// resolves to it), the operator's trusted private upstream, and a redirect
// into a forbidden address. Each answers the exact status, every refusal
// is audited, and nothing refused is ever dialed.
func TestBoxEndpointMatrix(t *testing.T) {
	f := newNetFixture(t)
	var names []string
	calls, other := matrixCalls(), otherBoxCalls()
	for _, e := range endpoints() {
		names = append(names, e.name)
		if calls[e.name] == nil {
			t.Errorf("endpoint %q has no row in the matrix: add it to matrixCalls (and otherBoxCalls)", e.name)
		}
	}
	for name := range calls {
		if !slices.Contains(names, name) {
			t.Errorf("matrix entry %q is no endpoint", name)
		}
	}
	all := func(code int) map[string]int {
		m := map[string]int{}
		for _, n := range names {
			m[n] = code
		}
		return m
	}
	trusted := "127.0.0.1:" + strconv.Itoa(f.okPort)
	cases := []matrixCase{
		{name: "own box", dest: "ok.test", calls: calls, status: all(200), dials: []string{okAddr.String() + ":443", okAddr.String() + ":80"}},
		{name: "another box's names", dest: "ok.test", calls: other,
			status: map[string]int{endpointConnect: 403, endpointProxy: 403, endpointGit: 404, endpointMCP: 404},
			na:     "n/a: the model's path names no box or resource"},
		{name: "trusted private upstream " + trusted, dest: trusted, calls: calls,
			status: map[string]int{endpointConnect: 403, endpointProxy: 403, endpointGit: 200, endpointModel: 200, endpointMCP: 200},
			dials:  []string{trusted}, reason: "loopback"},
		{name: "redirect to 127.0.0.1", dest: "redir.test", calls: calls,
			status: map[string]int{endpointProxy: 302, endpointGit: 502, endpointModel: 502, endpointMCP: 502},
			na:     "n/a: a CONNECT tunnel is opaque; following is a new CONNECT, the forbidden rows",
			dials:  []string{net.JoinHostPort(redirAddr.String(), "80")}, reason: "redirect"},
	}
	gw := all(403)
	gw[endpointProxy] = 404
	cases = append(cases, matrixCase{name: "the gateway's own address " + GatewayHost, dest: GatewayHost, calls: calls, status: gw,
		reason: "RFC 1918", unaudited: []string{endpointProxy}, na: "plain HTTP to it is the gateway itself, not egress"})
	f.res.names["gateway.test"] = []netip.Addr{netip.MustParseAddr(GatewayHost)}
	cases = append(cases, matrixCase{name: "name resolving to " + GatewayHost, dest: "gateway.test", calls: calls, status: all(403), reason: "RFC 1918"})
	for i, s := range forbiddenAddrs() {
		a := netip.MustParseAddr(s)
		dest := urlHost(a)
		if a.Unmap().IsLoopback() {
			// On the trap's port: a request that got through would land.
			dest += ":" + strconv.Itoa(f.trapPort)
		}
		why := netpolicy.Forbidden(a)
		cases = append(cases, matrixCase{name: "address " + s, dest: dest, calls: calls, status: all(403), reason: why})
		name := fmt.Sprintf("forbidden-%d.test", i)
		f.res.names[name] = []netip.Addr{a}
		cases = append(cases, matrixCase{name: "name resolving to " + s, dest: withPortOf(name, dest), calls: calls, status: all(403), reason: why})
	}

	table := []string{fmt.Sprintf("%-44s %s", "destination \\ endpoint", strings.Join(names, " | "))}
	for _, tc := range cases {
		f.pol.set("a", f.policyFor(tc.dest))
		row := []string{}
		for _, n := range names {
			want, c := tc.status[n], tc.calls[n]
			if want == 0 || c == nil {
				row = append(row, "n/a")
				continue
			}
			before := len(f.pol.audited(""))
			got, body := c(f, tc.dest)
			dialed := f.dials.take()
			row = append(row, strconv.Itoa(got))
			if got != want {
				t.Errorf("%s, %s: status %d, want %d (%q)", tc.name, n, got, want, body)
			}
			for _, d := range dialed {
				if !slices.Contains(tc.dials, d) {
					t.Errorf("%s, %s: dialed %s (may dial only %v)", tc.name, n, d, tc.dials)
				}
			}
			ds := f.pol.audited("")[before:]
			if slices.Contains(tc.unaudited, n) {
				if len(ds) != 0 {
					t.Errorf("%s, %s: audited %+v", tc.name, n, ds)
				}
				continue
			}
			if len(ds) == 0 {
				t.Errorf("%s, %s: no audit line", tc.name, n)
				continue
			}
			last := ds[len(ds)-1]
			if last.Box != "a" {
				t.Errorf("%s, %s: audited as box %q", tc.name, n, last.Box)
			}
			refused := want >= 400
			if refused != (last.Verdict == Deny) {
				t.Errorf("%s, %s: %d audited as %+v", tc.name, n, got, last)
			}
			if refused && tc.reason != "" && !strings.Contains(last.Reason, tc.reason) {
				t.Errorf("%s, %s: audited reason %q, want it to say %q", tc.name, n, last.Reason, tc.reason)
			}
		}
		table = append(table, fmt.Sprintf("%-44s %s", tc.name, strings.Join(row, " | ")))
		if tc.na != "" {
			table[len(table)-1] += "   (" + tc.na + ")"
		}
	}
	if n := f.trapHits.Load(); n != 0 {
		t.Errorf("the trap (a loopback port no box may reach) was reached %d times", n)
	}
	t.Logf("box endpoint matrix, %d endpoints × %d destinations (status per call; every refusal audited, no refused address dialed):\n%s",
		len(names), len(cases), strings.Join(table, "\n"))
}

// withPortOf gives name the port dest has, if any.
func withPortOf(name, dest string) string {
	if _, p, err := net.SplitHostPort(dest); err == nil {
		return name + ":" + p
	}
	return name
}
