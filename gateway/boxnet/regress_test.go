package boxnet

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRegressionConnectAnyPort: the egress proxy tunnelled to any port of
// an allowed host (ssh, databases, the host's other services). An entry
// opens ports 80 and 443; another port only when an entry names it
// ("example.com:8443", "*.example.com:8443"); plain HTTP likewise. A refusal
// is 403 naming the port, in the answer and in the audit line, before any
// lookup or dial.
func TestRegressionConnectAnyPort(t *testing.T) {
	f := newNetFixture(t)
	f.pol.set("a", BoxPolicy{AllowDomains: []string{"ok.test", "alt.test:8443", "*.wild.test:8443"}})
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"ok.test:443", 200},
		{"ok.test:22", 403},
		{"ok.test:8443", 403},
		{"ok.test:6379", 403},
		{"alt.test:8443", 200},
		{"alt.test:443", 403}, // an entry with a port opens that port only
		{"x.wild.test:8443", 200},
		{"x.wild.test:443", 403},
		{"wild.test:8443", 403}, // "*." does not cover the apex
	} {
		got := f.connectStatus(f.boxA, tc.target)
		dialed := f.dials.take()
		if got != tc.want {
			t.Errorf("CONNECT %s: %d, want %d", tc.target, got, tc.want)
		}
		host, port, _ := strings.Cut(tc.target, ":")
		d := f.pol.lastDecision(t, host)
		if tc.want != 200 {
			if len(dialed) != 0 {
				t.Errorf("CONNECT %s: dialed %v", tc.target, dialed)
			}
			if d.Verdict != Deny || strconv.Itoa(d.Port) != port || d.Detail != "CONNECT" {
				t.Errorf("CONNECT %s: decision %+v", tc.target, d)
			}
			if host != "wild.test" && !strings.Contains(d.Reason, "port "+port+" is not open for "+host) {
				t.Errorf("CONNECT %s: reason %q does not name the port", tc.target, d.Reason)
			}
		} else if d.Verdict != Allow || !slices.Equal(dialed, []string{okAddr.String() + ":" + port}) {
			t.Errorf("CONNECT %s: decision %+v, dialed %v", tc.target, d, dialed)
		}
	}
	// The answer says why, for the box's client to show.
	c, err := net.Dial("tcp", f.boxA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT ok.test:22 HTTP/1.1\r\nHost: ok.test:22\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "port 22 is not open for ok.test") {
		t.Errorf("CONNECT ok.test:22 answered %d %q", resp.StatusCode, body)
	}
	// Plain HTTP: the same rule.
	for target, want := range map[string]int{
		"http://ok.test/x":       200,
		"http://ok.test:8080/x":  403,
		"http://alt.test:8443/x": 200,
		"http://alt.test/x":      403,
	} {
		if got, body := f.do(f.boxA, http.MethodGet, target); got != want {
			t.Errorf("GET %s: %d %q, want %d", target, got, body, want)
		}
	}
	f.dials.take()
	// Open mode opens every name on 80 and 443, and no other port.
	f.pol.set("a", BoxPolicy{Open: true})
	if got := f.connectStatus(f.boxA, "any.test:443"); got != 200 {
		t.Errorf("open mode, CONNECT any.test:443: %d", got)
	}
	if got := f.connectStatus(f.boxA, "any.test:22"); got != 403 {
		t.Errorf("open mode, CONNECT any.test:22: %d", got)
	}
	if dialed := f.dials.take(); len(dialed) != 1 {
		t.Errorf("open mode dialed %v", dialed)
	}
}

// TestRegressionUpstreamSSRF: the MCP relay (and the model and git
// endpoints alike) dialed whatever its upstream URL named: a user's MCP
// server at 127.0.0.1, 169.254.169.254 or a name resolving there was
// reached from the gateway host on the box's behalf, and an upstream's
// redirect was handed to the box. Now the upstream is resolved once, every
// address checked under the egress policy (only the operator's trusted
// private upstreams excepted), the checked address dialed, and a redirect
// refused: 403 (502 for a redirect), audited, nothing refused dialed.
func TestRegressionUpstreamSSRF(t *testing.T) {
	f := newNetFixture(t)
	f.res.names["metadata.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	f.res.names["mixed.test"] = []netip.Addr{okAddr, netip.MustParseAddr("127.0.0.1")}
	trap := "127.0.0.1:" + strconv.Itoa(f.trapPort)
	for _, tc := range []struct {
		name, url string
		status    int
		reason    string
		dials     []string
	}{
		{"loopback", "http://" + trap + "/mcp", 403, "127.0.0.1 is a loopback address", nil},
		{"metadata", "http://169.254.169.254/latest/meta-data", 403, "cloud metadata", nil},
		{"private", "http://10.1.2.3:8080/mcp", 403, "RFC 1918", nil},
		{"mapped loopback", "http://[::ffff:127.0.0.1]:" + strconv.Itoa(f.trapPort) + "/mcp", 403, "loopback", nil},
		{"name for metadata", "http://metadata.test/mcp", 403, "169.254.169.254 is a cloud metadata address", nil},
		{"name for public and loopback", "http://mixed.test:" + strconv.Itoa(f.trapPort) + "/mcp", 403, "loopback", nil},
		{"unresolvable", "http://nosuch.test/mcp", 502, "cannot resolve", nil},
		{"redirect into loopback", "http://redir.test/mcp", 502, "redirect to http://" + trap, []string{redirAddr.String() + ":80"}},
		{"public", "http://ok.test/mcp", 200, "", []string{okAddr.String() + ":80"}},
		{"trusted private", "http://127.0.0.1:" + strconv.Itoa(f.okPort) + "/mcp", 200, "", []string{"127.0.0.1:" + strconv.Itoa(f.okPort)}},
	} {
		f.pol.set("a", BoxPolicy{MCP: map[string]MCPRoute{"tools": {URL: mustURL(t, tc.url), Headers: map[string]string{"Authorization": "Bearer s"}}}})
		got, body := f.do(f.boxA, http.MethodPost, "/mcp/tools")
		dialed := f.dials.take()
		if got != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.name, got, body, tc.status)
		}
		for _, d := range dialed {
			if !slices.Contains(tc.dials, d) {
				t.Errorf("%s: dialed %s", tc.name, d)
			}
		}
		ds := f.pol.audited(KindMCP)
		last := ds[len(ds)-1]
		if tc.reason != "" && (last.Verdict != Deny || !strings.Contains(last.Reason, tc.reason) || !strings.Contains(body, "sbx mcp: ")) {
			t.Errorf("%s: audited %+v, answered %q; want a refusal saying %q", tc.name, last, body, tc.reason)
		}
	}
	// The model and git upstreams are under the same policy.
	f.pol.set("a", f.policyFor("metadata.test"))
	if got, body := f.do(f.boxA, http.MethodPost, "/model/v1/messages"); got != 403 || !strings.Contains(body, "cloud metadata") {
		t.Errorf("model upstream at the metadata address: %d %q", got, body)
	}
	if got, body := f.do(f.boxA, http.MethodGet, "/git/a/acme/widget.git/info/refs?service=git-upload-pack"); got != 403 || !strings.Contains(body, "cloud metadata") {
		t.Errorf("git upstream at the metadata address: %d %q", got, body)
	}
	if dialed := f.dials.take(); len(dialed) != 0 {
		t.Errorf("dialed %v", dialed)
	}
	if n := f.trapHits.Load(); n != 0 {
		t.Errorf("the trap was reached %d times", n)
	}
}
