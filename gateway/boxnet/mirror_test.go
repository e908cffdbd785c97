package boxnet

import (
	"net/netip"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/netpolicy"
)

// TestEgressMirror: an admin's internal mirror lets a name the box's
// allow-list grants land in the mirror's range (the real curl through the
// proxy reaches a loopback server, and the decision says which mirror and
// range let it), and nothing else: not a name off the list, not open mode,
// not another port, not a range broader than a loopback address, not a
// name whose other answer is outside the ranges. No EgressTrust here:
// loopback is forbidden as on a real gateway.
func TestEgressMirror(t *testing.T) {
	tlsPort, plainPort := upstreams(t)
	mirror := func(spec string) netpolicy.Mirror {
		m, err := netpolicy.ParseMirrorSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	mirrors := []netpolicy.Mirror{
		mirror("corp npm.corp.test:" + plainPort + " 127.0.0.1"),
		mirror("corptls npm.corp.test:" + tlsPort + " 127.0.0.1"),
		mirror("wide wide.corp.test:" + plainPort + " 127.0.0.0/8"),
		mirror("mixed mixed.corp.test:" + plainPort + " 127.0.0.1"),
		mirror("gw gw.corp.test:" + plainPort + " 10.0.0.0/8"),
	}
	pol := newPolicy()
	pol.set("b1", BoxPolicy{Mirrors: mirrors, AllowDomains: []string{
		"npm.corp.test:" + plainPort, "npm.corp.test:" + tlsPort, "wide.corp.test:" + plainPort,
		"mixed.corp.test:" + plainPort, "plain.corp.test:" + plainPort, "gw.corp.test:" + plainPort,
	}})
	pol.set("open", BoxPolicy{Open: true, Mirrors: mirrors})
	pol.set("unlisted", BoxPolicy{Mirrors: mirrors, AllowDomains: []string{"other.test"}})
	res := &mapResolver{names: map[string][]netip.Addr{
		"npm.corp.test":   lo,
		"wide.corp.test":  lo,
		"plain.corp.test": lo,
		"mixed.corp.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3")},
		"gw.corp.test":    {netip.MustParseAddr("10.9.9.9")},
	}}
	s := newTestServer(Config{Policy: pol, Resolver: res,
		LocalAddrs: func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("10.9.9.9")} }})
	proxy := serveBox(t, s, "b1")

	for _, target := range []string{"http://npm.corp.test:" + plainPort + "/pkg", "https://npm.corp.test:" + tlsPort + "/pkg"} {
		body, status, err := curl(t, proxy, target)
		if err != nil || status != "200" || !strings.HasPrefix(body, "hello from") {
			t.Fatalf("%s through the mirror: %v %s %q", target, err, status, body)
		}
		d := pol.lastDecision(t, "npm.corp.test")
		if d.Verdict != Allow || d.Addr != "127.0.0.1" || !strings.Contains(d.Reason, "internal mirror exception") || !strings.Contains(d.Reason, "127.0.0.1 in 127.0.0.1/32 of mirror corp") {
			t.Fatalf("%s: decision %+v", target, d)
		}
	}

	for _, tc := range []struct{ box, target, host, reason string }{
		{"b1", "http://plain.corp.test:" + plainPort + "/", "plain.corp.test", "127.0.0.1 is a loopback address"},
		{"b1", "http://wide.corp.test:" + plainPort + "/", "wide.corp.test", "exactly that address"},
		{"b1", "http://mixed.corp.test:" + plainPort + "/", "mixed.corp.test", "10.1.2.3 is a private address (RFC 1918) (not in the ranges of mirror mixed"},
		{"b1", "http://gw.corp.test:" + plainPort + "/", "gw.corp.test", "exactly that address"},
		{"open", "http://npm.corp.test/", "npm.corp.test", "loopback"},
		{"unlisted", "http://npm.corp.test:" + plainPort + "/", "npm.corp.test", "allow-list"},
	} {
		p := proxy
		if tc.box != "b1" {
			p = serveBox(t, s, tc.box)
		}
		_, status, err := curl(t, p, tc.target)
		if err == nil && status == "200" {
			t.Fatalf("%s from %s passed", tc.target, tc.box)
		}
		if d := pol.lastDecision(t, tc.host); d.Verdict != Deny || !strings.Contains(d.Reason, tc.reason) {
			t.Fatalf("%s from %s: decision %+v, want %q", tc.target, tc.box, d, tc.reason)
		}
	}
}

// TestRegressionPrivateUpstreamsDoNotOpenEgress: net.private_upstreams
// trusts addresses for the git, model and MCP upstreams only; a box whose
// allow-list names a host resolving to such an address is still refused
// by the egress proxy (CONNECT and plain HTTP alike).
func TestRegressionPrivateUpstreamsDoNotOpenEgress(t *testing.T) {
	tlsPort, plainPort := upstreams(t)
	pol := newPolicy()
	pol.set("b", BoxPolicy{AllowDomains: []string{"git.corp.test:" + tlsPort, "git.corp.test:" + plainPort}})
	res := &mapResolver{names: map[string][]netip.Addr{"git.corp.test": lo}}
	s := newTestServer(Config{Policy: pol, Resolver: res,
		PrivateUpstreams: trust(t, "127.0.0.0/8", "127.0.0.1:"+tlsPort, "127.0.0.1:"+plainPort)})
	proxy := serveBox(t, s, "b")
	for _, target := range []string{"https://git.corp.test:" + tlsPort + "/", "http://git.corp.test:" + plainPort + "/"} {
		_, status, err := curl(t, proxy, target)
		if err == nil && status == "200" {
			t.Fatalf("%s passed through the egress proxy on net.private_upstreams alone", target)
		}
		if d := pol.lastDecision(t, "git.corp.test"); d.Verdict != Deny || !strings.Contains(d.Reason, "loopback") {
			t.Fatalf("%s: decision %+v", target, d)
		}
	}
}
