package netpolicy

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func TestForbidden(t *testing.T) {
	deny := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
		"127.0.0.1", "127.255.0.1", "169.254.169.254", "169.254.1.1", "172.16.0.1", "172.31.255.255",
		"192.0.0.8", "192.0.2.1", "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255",
		"198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"10.0.2.100", // the gateway's address in a box
		"::", "::1", "::127.0.0.1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
		"::ffff:0:0", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",
		"100::1", "2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:db8::1", "2001:10::1",
		"2002:7f00:1::1", "2002:0a00:0001::1", "2002:c0a8:0101::1", "3fff::1", "5f00::1",
		"fc00::1", "fd12:3456::1", "fe80::1", "fe80::1%eth0", "febf::1", "fec0::1", "ff02::1", "ff05::2",
		"4000::1", "8000::1", "e000::1",
	}
	allow := []string{
		"1.1.1.1", "8.8.8.8", "93.184.216.34", "140.82.112.3", "100.63.255.255", "100.128.0.0",
		"172.15.255.255", "172.32.0.0", "169.253.255.255", "192.167.1.1", "198.17.255.255", "223.255.255.255",
		"::ffff:1.1.1.1", "64:ff9b::101:101", "2002:0808:0808::1", "2606:4700:4700::1111",
		"2a00:1450:4001::200e", "2001:200::1", "2c0f:fb50::1",
	}
	for _, s := range deny {
		a := netip.MustParseAddr(s)
		if r := Forbidden(a); r == "" {
			t.Errorf("Forbidden(%s) allowed, want refused", s)
		}
	}
	for _, s := range allow {
		if r := Forbidden(netip.MustParseAddr(s)); r != "" {
			t.Errorf("Forbidden(%s) = %q, want allowed", s, r)
		}
	}
	// The test hook opens loopback and nothing else.
	for _, s := range []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"} {
		if r := Refused(netip.AddrPortFrom(netip.MustParseAddr(s), 443), LoopbackTrust()); r != "" {
			t.Errorf("with the test hook Forbidden(%s) = %q, want allowed", s, r)
		}
	}
	for _, s := range []string{"10.0.0.1", "169.254.169.254", "::", "fe80::1", "64:ff9b::7f00:1", "2002:7f00:1::1", "0.0.0.0"} {
		if r := Refused(netip.AddrPortFrom(netip.MustParseAddr(s), 443), LoopbackTrust()); r == "" {
			t.Errorf("with the test hook Forbidden(%s) allowed, want refused", s)
		}
	}
	if r := Forbidden(netip.MustParseAddr("169.254.169.254")); !strings.Contains(r, "metadata") {
		t.Errorf("metadata reason = %q", r)
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":                    "example.com",
		"example.com.":                   "example.com",
		"a-b.c_d.example":                "a-b.c_d.example",
		"[::1]":                          "::1",
		"::FFFF:127.0.0.1":               "::ffff:127.0.0.1",
		"10.0.0.1":                       "10.0.0.1",
		"":                               "",
		".":                              "",
		"a..b":                           "",
		"-a.com":                         "",
		"a-.com":                         "",
		"exa mple.com":                   "",
		"example.com:443":                "",
		"exa%2emple.com":                 "",
		"user@example.com":               "",
		"2130706433":                     "", // 127.0.0.1 as one number
		"0x7f.1":                         "",
		"127.1":                          "",
		"010.0.0.1":                      "",
		"fe80::1%eth0":                   "",
		"xn--bcher-kva.example":          "xn--bcher-kva.example",
		"bücher.example":                 "",
		strings.Repeat("a", 64) + ".com": "",
		"example.com\x00.evil":           "",
	} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAdmit(t *testing.T) {
	allow := []string{"example.com", "*.github.com", "API.Anthropic.com.", " pypi.org ", "*.", "*.127.0.0.1", "1.1.1.1", "bad name",
		"alt.example:8443", "*.svc.example:9000", "[2001:4860::8888]:853", "127.1"}
	for _, tc := range []struct {
		host         string
		port         int
		listed, open bool
	}{
		{"example.com", 443, true, true},
		{"example.com", 80, true, true},
		{"example.com", 8443, true, false}, // an entry without a port opens 80 and 443
		{"example.com", 22, true, false},
		{"www.example.com", 443, false, false}, // exact entries do not cover sub-domains
		{"github.com", 443, false, false},      // "*.x" does not match x itself
		{"api.github.com", 443, true, true},
		{"a.b.github.com", 80, true, true},
		{"evilgithub.com", 443, false, false},
		{"github.com.evil.net", 443, false, false},
		{"api.anthropic.com", 443, true, true},
		{"pypi.org", 443, true, true},
		{"1.1.1.1", 443, true, true},
		{"8.8.8.8", 443, false, false},
		{"x.127.0.0.1", 443, false, false},
		{"anything", 443, false, false},
		{"bad name", 443, false, false},
		{"alt.example", 8443, true, true}, // an entry with a port opens that port only
		{"alt.example", 443, true, false},
		{"a.svc.example", 9000, true, true},
		{"svc.example", 9000, false, false},
		{"a.svc.example", 443, true, false},
		{"2001:4860::8888", 853, true, true},
		{"2001:4860::8888", 443, true, false},
		{"127.0.0.1", 443, false, false}, // "127.1" is not an entry
	} {
		listed, open := Admit(allow, Host(tc.host), tc.port)
		if listed != tc.listed || open != tc.open {
			t.Errorf("Admit(%q, %d) = %v, %v; want %v, %v", tc.host, tc.port, listed, open, tc.listed, tc.open)
		}
	}
}

func TestParseEntry(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":            "example.com",
		" example.com. ":         "example.com",
		"*.npmjs.org":            "*.npmjs.org",
		"example.com:8443":       "example.com:8443",
		"*.Example.com:8443":     "*.example.com:8443",
		"example.com:443":        "example.com:443",
		"example.com:08443":      "example.com:8443",
		"1.2.3.4":                "1.2.3.4",
		"1.2.3.4:80":             "1.2.3.4:80",
		"2001:DB8::1":            "2001:db8::1",
		"[2001:db8::1]":          "2001:db8::1",
		"[2001:db8::1]:8443":     "[2001:db8::1]:8443",
		"a_b.example":            "a_b.example",
		"xn--bcher-kva.example":  "xn--bcher-kva.example",
		"10.0.0.1":               "10.0.0.1", // private: parsed, refused by address at dial
		"*.com":                  "*.com",
		"example.com:65535":      "example.com:65535",
		"::ffff:127.0.0.1":       "::ffff:127.0.0.1",
		"[::ffff:127.0.0.1]:443": "[::ffff:127.0.0.1]:443",
	} {
		e, err := ParseEntry(in)
		if err != nil {
			t.Errorf("ParseEntry(%q): %v", in, err)
			continue
		}
		if e.String() != want {
			t.Errorf("ParseEntry(%q) = %q, want %q", in, e, want)
		}
	}
	for _, bad := range []string{
		"", " ", "*", "*.", "*.*.x.com", "a..b", "-a.com", "http://x.com", "x.com/path", "x.com:", "x.com:0",
		"x.com:65536", "x.com:+80", "x.com:-1", "x.com: 80", "x.com:8o", "x.com:80:80", "*.1.2.3.4", "*.[::1]",
		"[::1", "[::1]x", "[::1]:", "[example.com]", "[example.com]:80", "127.1", "0x7f.1", "2130706433",
		"fe80::1%eth0", "[fe80::1%eth0]:80", "bücher.example", "a b.com", "user@x.com", "x.com\\@y",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 130) + "com",
	} {
		if e, err := ParseEntry(bad); err == nil {
			t.Errorf("ParseEntry(%q) = %q, want an error", bad, e)
		}
	}
}

func TestParseTrust(t *testing.T) {
	for in, want := range map[string]string{
		"10.20.0.0/16":         "10.20.0.0/16",
		"10.20.3.4/16":         "10.20.0.0/16",
		"10.1.2.3":             "10.1.2.3",
		" 127.0.0.1:8080 ":     "127.0.0.1:8080",
		"[::1]:8080":           "[::1]:8080",
		"::1":                  "::1",
		"fd00:1::/64":          "fd00:1::/64",
		"::ffff:127.0.0.1":     "127.0.0.1",
		"[::ffff:10.0.0.1]:80": "10.0.0.1:80",
		"::ffff:10.0.0.0/104":  "10.0.0.0/8",
	} {
		tr, err := ParseTrust(in)
		if err != nil || tr.String() != want {
			t.Errorf("ParseTrust(%q) = %q, %v; want %q", in, tr, err, want)
		}
	}
	for _, bad := range []string{"", "localhost:8080", "git.corp.example", "10.0.0.0/33", "127.0.0.1:0", "127.0.0.1:99999",
		"10.0.0.0/8:443", "fe80::1%eth0", "[fe80::1%eth0]:80", "http://10.0.0.1/", "::ffff:10.0.0.0/90"} {
		if tr, err := ParseTrust(bad); err == nil {
			t.Errorf("ParseTrust(%q) = %q, want an error", bad, tr)
		}
	}
	trusted, err := ParseTrusts([]string{"127.0.0.1:8080", "10.20.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	for ap, want := range map[string]string{
		"127.0.0.1:8080":          "",
		"[::ffff:127.0.0.1]:8080": "",
		"127.0.0.1:8081":          "127.0.0.1 is a loopback address",
		"127.0.0.2:8080":          "127.0.0.2 is a loopback address",
		"10.20.1.1:22":            "",
		"10.21.1.1:443":           "10.21.1.1 is a private address (RFC 1918)",
		"169.254.169.254:80":      "169.254.169.254 is a cloud metadata address",
		"[::1]:8080":              "::1 is a reserved IPv6 address (loopback, unspecified, IPv4-compatible)",
		"1.1.1.1:443":             "",
	} {
		if got := Refused(netip.MustParseAddrPort(ap), trusted); got != want {
			t.Errorf("Refused(%s) = %q, want %q", ap, got, want)
		}
	}
	if _, err := ParseTrusts([]string{"10.0.0.1", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("ParseTrusts with a bad entry: %v", err)
	}
}

func TestCheckUpstream(t *testing.T) {
	trusted, _ := ParseTrusts([]string{"127.0.0.1:8080", "10.20.0.0/16"})
	for raw, want := range map[string]string{
		"https://mcp.example.com/mcp":        "",
		"http://127.0.0.1:8080/mcp":          "",
		"http://10.20.1.2/mcp":               "",
		"https://93.184.215.14/":             "",
		"http://127.0.0.1/mcp":               "127.0.0.1 is a loopback address",
		"http://127.0.0.1:8081/":             "127.0.0.1 is a loopback address",
		"http://169.254.169.254/latest":      "cloud metadata",
		"http://[::1]:8080/":                 "reserved IPv6",
		"http://[::ffff:169.254.169.254]/":   "cloud metadata",
		"http://[fd00::1]/":                  "unique local",
		"http://[fe80::1%25eth0]/":           "not a DNS name",
		"http://10.1.2.3/":                   "RFC 1918",
		"http://100.64.0.1/":                 "CGNAT",
		"http://0.0.0.0:8080/":               "this-network",
		"http://localhost:8080/":             "loopback name",
		"http://LOCALHOST./":                 "loopback name",
		"http://evil.localhost/":             "loopback name",
		"http://2130706433/":                 "not a DNS name",
		"http://0x7f.1/":                     "not a DNS name",
		"http://127.1:8080/":                 "not a DNS name",
		"http://mcp.example.com:99999/":      "port",
		"https://metadata.google.internal/x": "", // a name: judged by its addresses at dial
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		err = CheckUpstream(u, trusted)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckUpstream(%s): %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckUpstream(%s) = %v, want %q", raw, err, want)
		}
	}
}

// FuzzAddrVerdict checks the address decision against independent facts:
// an IPv4 address and every IPv6 spelling of it (mapped, NAT64, 6to4) get
// the same verdict, the standard library's own classes are always refused,
// and the loopback trust never opens anything but loopback.
func FuzzAddrVerdict(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.1.2.3", "1.1.1.1", "169.254.169.254", "100.64.0.1", "192.168.0.1"} {
		a := netip.MustParseAddr(s).As4()
		f.Add(a[0], a[1], a[2], a[3])
	}
	f.Fuzz(func(t *testing.T, a, b, c, d byte) {
		v4 := netip.AddrFrom4([4]byte{a, b, c, d})
		want := Forbidden(v4) == ""
		mapped := netip.AddrFrom16(v4.As16())
		n := [16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: a, 13: b, 14: c, 15: d}
		six := [16]byte{0x20, 0x02, a, b, c, d, 10: 1}
		for _, v6 := range []netip.Addr{mapped, netip.AddrFrom16(n), netip.AddrFrom16(six)} {
			if got := Forbidden(v6) == ""; got != want {
				t.Fatalf("%s allowed=%v but %s allowed=%v", v4, want, v6, got)
			}
		}
		if want && (v4.IsLoopback() || v4.IsPrivate() || v4.IsLinkLocalUnicast() || v4.IsMulticast() || v4.IsUnspecified() || a == 0 || a >= 240 || (a == 100 && b&0xc0 == 64)) {
			t.Fatalf("%s allowed", v4)
		}
		if Refused(netip.AddrPortFrom(v4, 443), LoopbackTrust()) == "" && !want && !v4.IsLoopback() {
			t.Fatalf("the loopback trust opened %s", v4)
		}
	})
}

// FuzzHostDecision checks the name decision: a host that passes
// normalization is lower-case, dot-separated, never an IPv4 spelling other
// than the canonical one, and a wildcard entry admits only names strictly
// below its suffix.
func FuzzHostDecision(f *testing.F) {
	for _, s := range []string{"example.com", "API.github.com.", "[::1]", "127.1", "a..b", "github.com.evil", "x.github.com"} {
		f.Add(s, "*.github.com")
	}
	f.Fuzz(func(t *testing.T, host, entry string) {
		h := Host(host)
		if h == "" {
			if listed, _ := Admit([]string{entry, "*." + entry}, h, 443); listed {
				t.Fatalf("empty host allowed by %q", entry)
			}
			return
		}
		if h != strings.ToLower(h) || strings.HasSuffix(h, ".") || len(h) > MaxNameLen {
			t.Fatalf("Host(%q) = %q", host, h)
		}
		if _, err := netip.ParseAddr(h); err != nil && looksNumeric(h) {
			t.Fatalf("numeric name %q passed", h)
		}
		if Host(h) != h {
			t.Fatalf("Host not idempotent on %q", h)
		}
		if listed, _ := Admit([]string{"*." + entry}, h, 443); listed {
			suffix := Host(entry)
			if suffix == "" || !strings.HasSuffix(h, "."+suffix) || h == suffix {
				t.Fatalf("*.%q admitted %q", entry, h)
			}
		}
	})
}

// FuzzAllowEntry checks the one parser of allow-list entries (the core
// cleans with it, the proxy matches with it): an accepted entry reads back
// from its canonical form to itself, its host is a normalized name or
// address, its port is in range, it covers exactly its host (or the names
// strictly below it), and opens exactly its port (or 80 and 443).
func FuzzAllowEntry(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:8443", "[2001:db8::1]:443", "1.2.3.4:80", "x.com:", "*.1.2.3.4", "[::1", "a..b:1"} {
		f.Add(s, "a.example.com", 8443)
	}
	f.Fuzz(func(t *testing.T, s, host string, port int) {
		e, err := ParseEntry(s)
		if err != nil {
			return
		}
		back, err := ParseEntry(e.String())
		if err != nil || back != e {
			t.Fatalf("ParseEntry(%q) = %+v, whose String %q reads back as %+v, %v", s, e, e, back, err)
		}
		if e.Host == "" || Host(e.Host) != e.Host || e.Port < 0 || e.Port > 65535 || (e.Wildcard && isAddr(e.Host)) {
			t.Fatalf("ParseEntry(%q) = %+v", s, e)
		}
		if strings.ContainsAny(e.String(), " /@\\%?#") {
			t.Fatalf("ParseEntry(%q) = %q", s, e)
		}
		h := Host(host)
		covers := e.Covers(h)
		switch {
		case h == "":
			if covers {
				t.Fatalf("%q covers the empty host", e)
			}
		case !e.Wildcard && covers != (h == e.Host):
			t.Fatalf("%q covers %q: %v", e, h, covers)
		case e.Wildcard && covers != (strings.HasSuffix(h, "."+e.Host) && !isAddr(h)):
			t.Fatalf("%q covers %q: %v", e, h, covers)
		}
		opens := e.Opens(port)
		if (e.Port == 0 && opens != (port == 80 || port == 443)) || (e.Port != 0 && opens != (port == e.Port)) {
			t.Fatalf("%q opens %d: %v", e, port, opens)
		}
	})
}

// FuzzTrust checks the parser of trusted private upstreams: an accepted
// entry reads back from its canonical form, and trusts only addresses in
// its prefix on its port.
func FuzzTrust(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "127.0.0.1:8080", "[::1]:80", "::ffff:10.0.0.0/104", "x:1", "1.2.3.4/33"} {
		f.Add(s, "10.1.2.3:80")
	}
	f.Fuzz(func(t *testing.T, s, target string) {
		tr, err := ParseTrust(s)
		if err != nil {
			return
		}
		back, err := ParseTrust(tr.String())
		if err != nil || back != tr {
			t.Fatalf("ParseTrust(%q) = %q reads back as %q, %v", s, tr, back, err)
		}
		ap, err := netip.ParseAddrPort(target)
		if err != nil {
			return
		}
		a := ap.Addr().WithZone("").Unmap()
		if Trusted([]Trust{tr}, ap) != (tr.Prefix.Contains(a) && (tr.Port == 0 || tr.Port == int(ap.Port()))) {
			t.Fatalf("%q trusts %s: %v", tr, ap, !Trusted([]Trust{tr}, ap))
		}
	})
}
