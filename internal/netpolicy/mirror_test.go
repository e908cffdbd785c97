package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseMirror: a mirror is a plain name (not a preset's), one host
// (no wildcard), and ranges that are networks, not the internet; a name
// without ranges is refused, an address without one is its own range.
func TestParseMirror(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // canonical String, or "" with err
		err  string
	}{
		{spec: "npm-corp npm.corp.example 10.20.0.0/16", want: "npm-corp npm.corp.example 10.20.0.0/16"},
		{spec: "NPM-Corp NPM.corp.example.:4873 10.20.1.7/16,10.30.0.1", want: "npm-corp npm.corp.example:4873 10.20.0.0/16 10.30.0.1/32"},
		{spec: "local 127.0.0.1:4873", want: "local 127.0.0.1:4873 127.0.0.1/32"},
		{spec: "v6 [fd00::5]:8080", want: "v6 [fd00::5]:8080 fd00::5/128"},
		{spec: "mapped m.example ::ffff:10.1.0.0/112", want: "mapped m.example 10.1.0.0/16"},
		{spec: "dup m.example 10.1.0.0/16,10.1.2.3/16", want: "dup m.example 10.1.0.0/16"},
		{spec: "named npm.corp.example", err: "name the range"},
		{spec: "npm registry.example 10.0.0.0/8", err: "preset"},
		{spec: "wild *.corp.example 10.0.0.0/8", err: "wildcard"},
		{spec: "broad m.example 0.0.0.0/0", err: "too broad"},
		{spec: "broad6 m.example ::/8", err: "too broad"},
		{spec: "port m.example 10.0.0.1:80", err: "no port"},
		{spec: "name m.example example.com", err: "CIDR"},
		{spec: "-lead m.example 10.0.0.0/8", err: "starting with"},
		{spec: "bad\x1bname m.example 10.0.0.0/8", err: `"bad\x1bname"`},
		{spec: "toolong" + strings.Repeat("x", 40) + " m.example 10.0.0.0/8", err: "1 to 32"},
		{spec: "one", err: "want NAME HOST"},
		{spec: "a b 10.0.0.1 10.0.0.2 10.0.0.3 10.0.0.4 10.0.0.5 10.0.0.6 10.0.0.7 10.0.0.8 10.0.0.9", err: "want NAME HOST"},
		{spec: "sp m.example 10.1.0.0/16 10.2.0.0/16", want: "sp m.example 10.1.0.0/16 10.2.0.0/16"},
		{spec: "num 10.1 10.0.0.0/8", err: "mirror host"},
		{spec: "many m.example 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8,10.0.0.9", err: "max 8"},
	} {
		m, err := ParseMirrorSpec(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, %v; want an error with %q", tc.spec, m, err, tc.err)
			}
			continue
		}
		if err != nil || m.String() != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.spec, m.String(), err, tc.want)
		}
	}
}

// TestMirrorAdmits: the exception is for the mirror's host and port and
// its ranges only; a loopback, metadata or gateway address passes only
// through a range that is exactly it.
func TestMirrorAdmits(t *testing.T) {
	mirrors := []Mirror{
		mustMirror(t, "corp npm.corp.example 10.20.0.0/16"),
		mustMirror(t, "alt npm.corp.example:4873 10.30.0.0/16"),
		mustMirror(t, "lo local.example:4873 127.0.0.1"),
		mustMirror(t, "wide wide.example 10.0.0.0/8,127.0.0.0/8,169.254.0.0/16"),
		mustMirror(t, "gw gw.example 192.0.2.2"),
	}
	self := func(a netip.Addr) bool {
		return a == netip.MustParseAddr("10.9.9.9") || a == netip.MustParseAddr("192.0.2.2")
	}
	for _, tc := range []struct {
		host string
		port int
		addr string
		want string // the mirror, or "" when refused
		why  string
	}{
		{"npm.corp.example", 443, "10.20.3.4", "corp", ""},
		{"npm.corp.example", 80, "10.20.3.4", "corp", ""},
		{"npm.corp.example", 8080, "10.20.3.4", "", ""}, // no mirror for that port
		{"npm.corp.example", 443, "10.21.0.1", "", "not in the ranges of mirror corp"},
		{"npm.corp.example", 4873, "10.30.0.1", "alt", ""},
		{"npm.corp.example", 4873, "10.20.3.4", "", "not in the ranges of mirror alt"},
		{"other.example", 443, "10.20.3.4", "", ""},
		{"corp.example", 443, "10.20.3.4", "", ""},
		{"local.example", 4873, "127.0.0.1", "lo", ""},
		{"local.example", 4873, "127.0.0.2", "", "not in the ranges"},
		{"local.example", 443, "127.0.0.1", "", ""},
		{"wide.example", 443, "10.1.2.3", "wide", ""},
		{"wide.example", 443, "127.0.0.1", "", "exactly that address"},
		{"wide.example", 443, "169.254.169.254", "", "exactly that address"},
		{"wide.example", 443, "10.9.9.9", "", "exactly that address"}, // the gateway's own
		{"wide.example", 443, "::ffff:127.0.0.1", "", "exactly that address"},
		{"gw.example", 443, "192.0.2.2", "gw", ""},
	} {
		m, _, why, ok := MirrorAdmits(mirrors, tc.host, tc.port, netip.MustParseAddr(tc.addr), self)
		if ok != (tc.want != "") || m.Name != tc.want || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
			t.Errorf("%s:%d at %s: %q %v %q; want %q %q", tc.host, tc.port, tc.addr, m.Name, ok, why, tc.want, tc.why)
		}
	}
}

func mustMirror(t *testing.T, spec string) Mirror {
	t.Helper()
	m, err := ParseMirrorSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// FuzzMirror: whatever the input, a parsed mirror reads back from its
// String to itself, its ranges are bounded networks, and its exception
// never admits an address outside its ranges, another host, or a
// sensitive address through a range broader than that address.
func FuzzMirror(f *testing.F) {
	f.Add("corp npm.corp.example:4873 10.20.0.0/16", "npm.corp.example", 4873, "10.20.1.2")
	f.Add("lo 127.0.0.1", "127.0.0.1", 443, "127.0.0.1")
	f.Add("w w.example 127.0.0.0/8", "w.example", 80, "127.0.0.5")
	f.Add("v [fd00::1]:80", "fd00::1", 80, "::ffff:127.0.0.1")
	f.Fuzz(func(t *testing.T, spec, host string, port int, addr string) {
		m, err := ParseMirrorSpec(spec)
		if err != nil {
			return
		}
		again, err := ParseMirrorSpec(m.String())
		if err != nil || again.String() != m.String() {
			t.Fatalf("%q → %q → %q, %v", spec, m.String(), again.String(), err)
		}
		if len(m.Ranges) == 0 || len(m.Ranges) > MaxMirrorRanges || Host(m.Host) != m.Host {
			t.Fatalf("%q: %+v", spec, m)
		}
		for _, p := range m.Ranges {
			if p != p.Masked() || (p.Addr().Is4() && p.Bits() < minRangeBits4) || (p.Addr().Is6() && p.Bits() < minRangeBits6) {
				t.Fatalf("%q: range %s", spec, p)
			}
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		got, r, _, ok := MirrorAdmits([]Mirror{m}, host, port, a, nil)
		if !ok {
			return
		}
		u := a.WithZone("").Unmap()
		switch {
		case got.Name != m.Name || host != m.Host || !m.Entry().Opens(port):
			t.Fatalf("%q admitted %s:%d", spec, host, port)
		case !r.Contains(u):
			t.Fatalf("%q admitted %s outside %s", spec, a, r)
		case sensitive(u) && !(r.IsSingleIP() && r.Addr() == u):
			t.Fatalf("%q admitted sensitive %s through %s", spec, a, r)
		}
	})
}
