package boxnet

import (
	"net/netip"
	"strconv"
	"strings"
)

// blocked is one forbidden address range and why.
type blocked struct {
	prefix netip.Prefix
	reason string
}

// blocked4 are the IPv4 ranges a box may never reach, whatever the policy:
// the gateway host, its private networks and the cloud metadata service are
// the targets an escaped request would aim at.
var blocked4 = []blocked{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network address (0.0.0.0/8)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT, RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment (192.0.0.0/24)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "6to4 relay anycast"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast address"},
}

// blocked6 are the IPv6 ranges refused outright. Ranges that embed an IPv4
// address (mapped, NAT64, 6to4) are unwrapped and judged by that address
// first, in addrVerdict.
var blocked6 = []blocked{
	{netip.MustParsePrefix("::/8"), "reserved IPv6 address (loopback, unspecified, IPv4-compatible)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol assignment (Teredo, ORCHID, ...)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "segment routing address"},
	{netip.MustParsePrefix("fc00::/7"), "unique local address (fc00::/7)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	global6    = netip.MustParsePrefix("2000::/3")
	loopback4  = netip.MustParsePrefix("127.0.0.0/8")
	loopback6  = netip.MustParseAddr("::1")
	maxNameLen = 253
)

// addrVerdict returns "" when a box may connect to a, or why not. With
// allowLoopback (tests only) loopback addresses pass.
func addrVerdict(a netip.Addr, allowLoopback bool) string {
	if !a.IsValid() {
		return "invalid address"
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return addrVerdict(a.Unmap(), allowLoopback)
	}
	if a.Is4() {
		if allowLoopback && loopback4.Contains(a) {
			return ""
		}
		for _, b := range blocked4 {
			if b.prefix.Contains(a) {
				return b.reason
			}
		}
		return ""
	}
	if allowLoopback && a == loopback6 {
		return ""
	}
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if r := addrVerdict(v4, false); r != "" {
			return "NAT64 of " + v4.String() + ": " + r
		}
		return ""
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		if r := addrVerdict(v4, false); r != "" {
			return "6to4 of " + v4.String() + ": " + r
		}
		return ""
	}
	for _, b := range blocked6 {
		if b.prefix.Contains(a) {
			return b.reason
		}
	}
	if !global6.Contains(a) {
		return "not a global unicast IPv6 address"
	}
	return ""
}

// normalizeHost lowercases a destination name and drops one trailing dot; it
// returns "" for anything that is not a plausible DNS name or IP literal, so
// that odd spellings cannot slip past the allow-list.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if h == "" || len(h) > maxNameLen {
		return ""
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return ""
		}
		return a.String()
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return ""
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return ""
			}
		}
	}
	// All-numeric dotted names are IPv4 spellings (010.1, 0x7f.1, 2130706433)
	// that some resolvers accept: refuse them rather than guess.
	if looksNumeric(h) {
		return ""
	}
	return h
}

// looksNumeric reports whether the last label is all digits or hex: no TLD
// is, and inet_aton accepts such names as addresses.
func looksNumeric(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.HasPrefix(last, "0x") {
		return true
	}
	_, err := strconv.ParseUint(last, 10, 64)
	return err == nil
}

// nameAllowed reports whether a normalized host is on the allow-list. An
// entry "*.example.com" matches names strictly below example.com, not
// example.com itself; other entries match exactly. Entries are normalized
// the same way as the host; malformed entries match nothing.
func nameAllowed(host string, allow []string) bool {
	for _, e := range allow {
		e = strings.TrimSpace(e)
		if suffix, ok := strings.CutPrefix(e, "*."); ok {
			suffix = normalizeHost(suffix)
			if suffix != "" && strings.HasSuffix(host, "."+suffix) {
				if _, err := netip.ParseAddr(host); err == nil {
					continue // an address is not "below" a name
				}
				return true
			}
			continue
		}
		if n := normalizeHost(e); n != "" && n == host {
			return true
		}
	}
	return false
}
