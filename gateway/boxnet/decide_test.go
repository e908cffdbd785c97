package boxnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAddrVerdict(t *testing.T) {
	deny := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
		"127.0.0.1", "127.255.0.1", "169.254.169.254", "169.254.1.1", "172.16.0.1", "172.31.255.255",
		"192.0.0.8", "192.0.2.1", "192.88.99.1", "192.168.1.1", "198.18.0.1", "198.19.255.255",
		"198.51.100.7", "203.0.113.9", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		GatewayHost,
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
		if r := addrVerdict(a, false); r == "" {
			t.Errorf("addrVerdict(%s) allowed, want refused", s)
		}
	}
	for _, s := range allow {
		if r := addrVerdict(netip.MustParseAddr(s), false); r != "" {
			t.Errorf("addrVerdict(%s) = %q, want allowed", s, r)
		}
	}
	// The test hook opens loopback and nothing else.
	for _, s := range []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"} {
		if r := addrVerdict(netip.MustParseAddr(s), true); r != "" {
			t.Errorf("with the test hook addrVerdict(%s) = %q, want allowed", s, r)
		}
	}
	for _, s := range []string{"10.0.0.1", "169.254.169.254", "::", "fe80::1", "64:ff9b::7f00:1", "2002:7f00:1::1", "0.0.0.0"} {
		if r := addrVerdict(netip.MustParseAddr(s), true); r == "" {
			t.Errorf("with the test hook addrVerdict(%s) allowed, want refused", s)
		}
	}
	if r := addrVerdict(netip.MustParseAddr("169.254.169.254"), false); !strings.Contains(r, "metadata") {
		t.Errorf("metadata reason = %q", r)
	}
}

func TestNormalizeHost(t *testing.T) {
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
		if got := normalizeHost(in); got != want {
			t.Errorf("normalizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNameAllowed(t *testing.T) {
	allow := []string{"example.com", "*.github.com", "API.Anthropic.com.", " pypi.org ", "*.", "*.127.0.0.1", "1.1.1.1", "bad name"}
	for host, want := range map[string]bool{
		"example.com":         true,
		"www.example.com":     false, // exact entries do not cover sub-domains
		"github.com":          false, // "*.x" does not match x itself
		"api.github.com":      true,
		"a.b.github.com":      true,
		"evilgithub.com":      false,
		"github.com.evil.net": false,
		"api.anthropic.com":   true,
		"pypi.org":            true,
		"1.1.1.1":             true,
		"8.8.8.8":             false,
		"x.127.0.0.1":         false,
		"anything":            false,
		"bad name":            false,
	} {
		if got := nameAllowed(normalizeHost(host), allow); got != want {
			t.Errorf("nameAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// FuzzAddrVerdict checks the address decision against independent facts:
// an IPv4 address and every IPv6 spelling of it (mapped, NAT64, 6to4) get
// the same verdict, the standard library's own classes are always refused,
// and the loopback hook never opens anything but loopback.
func FuzzAddrVerdict(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "10.1.2.3", "1.1.1.1", "169.254.169.254", "100.64.0.1", "192.168.0.1"} {
		a := netip.MustParseAddr(s).As4()
		f.Add(a[0], a[1], a[2], a[3])
	}
	f.Fuzz(func(t *testing.T, a, b, c, d byte) {
		v4 := netip.AddrFrom4([4]byte{a, b, c, d})
		want := addrVerdict(v4, false) == ""
		mapped := netip.AddrFrom16(v4.As16())
		n := [16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: a, 13: b, 14: c, 15: d}
		six := [16]byte{0x20, 0x02, a, b, c, d, 10: 1}
		for _, v6 := range []netip.Addr{mapped, netip.AddrFrom16(n), netip.AddrFrom16(six)} {
			if got := addrVerdict(v6, false) == ""; got != want {
				t.Fatalf("%s allowed=%v but %s allowed=%v", v4, want, v6, got)
			}
		}
		if want && (v4.IsLoopback() || v4.IsPrivate() || v4.IsLinkLocalUnicast() || v4.IsMulticast() || v4.IsUnspecified() || a == 0 || a >= 240 || (a == 100 && b&0xc0 == 64)) {
			t.Fatalf("%s allowed", v4)
		}
		if addrVerdict(v4, true) == "" && !want && !v4.IsLoopback() {
			t.Fatalf("the loopback hook opened %s", v4)
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
		h := normalizeHost(host)
		if h == "" {
			if nameAllowed(h, []string{entry, "*." + entry}) && entry != "" {
				// "" can only match nothing.
				t.Fatalf("empty host allowed by %q", entry)
			}
			return
		}
		if h != strings.ToLower(h) || strings.HasSuffix(h, ".") || len(h) > maxNameLen {
			t.Fatalf("normalizeHost(%q) = %q", host, h)
		}
		if _, err := netip.ParseAddr(h); err != nil && looksNumeric(h) {
			t.Fatalf("numeric name %q passed", h)
		}
		if normalizeHost(h) != h {
			t.Fatalf("normalizeHost not idempotent on %q", h)
		}
		if nameAllowed(h, []string{"*." + entry}) {
			suffix := normalizeHost(entry)
			if suffix == "" || !strings.HasSuffix(h, "."+suffix) || h == suffix {
				t.Fatalf("*.%q admitted %q", entry, h)
			}
		}
		if nameAllowed(h, []string{entry}) && !strings.HasPrefix(strings.TrimSpace(entry), "*.") && normalizeHost(strings.TrimSpace(entry)) != h {
			t.Fatalf("entry %q admitted %q", entry, h)
		}
	})
}
