package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Internal package mirrors: an admin's explicit exception to the address
// policy for one named host. Companies run their npm, PyPI and Go mirrors
// on private addresses (10.x), which the egress proxy refuses like any
// other; a Mirror names the host, the port, and the ranges its addresses
// may fall in, and the egress proxy accepts a forbidden address for that
// host only when:
//
//   - the box's allow-list grants the host (by name, as any destination):
//     a mirror opens nothing by itself, it only lets a granted name land
//     in a private range;
//   - the port is the mirror's (or 80/443 for a mirror without one);
//   - every address the name resolved to is allowed by the policy or
//     falls in one of the mirror's ranges;
//   - a sensitive address (loopback, link-local with the cloud metadata
//     service, unspecified, or one of the gateway's own addresses) is
//     accepted only when a range is exactly that one address: a DNS answer
//     cannot wander into 127.0.0.0/8 or onto the gateway host through a
//     broad range such as 10.0.0.0/8.
//
// The ranges are what the admin names (--range). Without one, a mirror
// whose host is an address is limited to that address; a mirror named by
// a DNS name needs its ranges named, since what a name resolves to can
// change (the same rule as net.private_upstreams).

// Mirror is one internal package mirror.
type Mirror struct {
	Name string `json:"name"`
	// Host is a normalized DNS name or IP literal (no wildcard).
	Host string `json:"host"`
	// Port is the one port the exception covers; 0 means 80 and 443.
	Port int `json:"port,omitempty"`
	// Ranges are the prefixes (masked) the host's addresses may fall in.
	Ranges []netip.Prefix `json:"ranges"`
}

// Bounds of a mirror declaration.
const (
	maxMirrorName   = 32
	MaxMirrorRanges = 8
	// The broadest range accepted: a mirror's range names a network, not
	// the internet.
	minRangeBits4 = 8
	minRangeBits6 = 16
)

// ParseMirrorName reads a mirror's name: 1 to 32 of a-z, 0-9, '-', '_',
// starting with a letter or digit, not a preset's name (an allow-list's
// "@npm" must keep meaning one thing).
func ParseMirrorName(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || len(s) > maxMirrorName {
		return "", fmt.Errorf("a mirror name is 1 to %d of a-z, 0-9, - and _", maxMirrorName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || (i > 0 && (c == '-' || c == '_'))) {
			return "", fmt.Errorf("mirror name %s: want a-z, 0-9, - and _, starting with a letter or digit", quoteName(s))
		}
	}
	if _, ok := lookup(s); ok {
		return "", fmt.Errorf("mirror name %s is a preset's (@%s): choose another", s, s)
	}
	return s, nil
}

// ParseRange reads one mirror range: a CIDR prefix ("10.20.0.0/16") or an
// address ("10.1.2.3", "fd00::1"), masked; an IPv4-mapped form is read as
// IPv4. Ranges broader than /8 (IPv6: /16) are refused.
func ParseRange(s string) (netip.Prefix, error) {
	t, err := ParseTrust(s)
	if err != nil || t.Port != 0 {
		return netip.Prefix{}, fmt.Errorf("range %q: want a CIDR prefix (10.20.0.0/16) or an address (10.1.2.3), no port", s)
	}
	p := t.Prefix
	if (p.Addr().Is4() && p.Bits() < minRangeBits4) || (p.Addr().Is6() && p.Bits() < minRangeBits6) {
		return netip.Prefix{}, fmt.Errorf("range %s is too broad: a mirror's range is at most a /%d (IPv6: /%d)", p, minRangeBits4, minRangeBits6)
	}
	return p, nil
}

// ParseMirror reads a mirror declaration: its name, its HOST[:PORT] (a DNS
// name or an address, no wildcard, ParseEntry's syntax) and its ranges.
// Without ranges, a host that is an address is its own range; a name
// needs ranges.
func ParseMirror(name, hostport string, ranges []string) (Mirror, error) {
	n, err := ParseMirrorName(name)
	if err != nil {
		return Mirror{}, err
	}
	e, err := ParseEntry(hostport)
	if err != nil {
		return Mirror{}, fmt.Errorf("mirror host %q: %w", hostport, err)
	}
	if e.Wildcard {
		return Mirror{}, fmt.Errorf("mirror host %q: a mirror is one host, not a wildcard", hostport)
	}
	m := Mirror{Name: n, Host: e.Host, Port: e.Port, Ranges: []netip.Prefix{}}
	if len(ranges) > MaxMirrorRanges {
		return Mirror{}, fmt.Errorf("%d ranges (max %d)", len(ranges), MaxMirrorRanges)
	}
	for _, r := range ranges {
		p, err := ParseRange(r)
		if err != nil {
			return Mirror{}, err
		}
		if !slices.Contains(m.Ranges, p) {
			m.Ranges = append(m.Ranges, p)
		}
	}
	if len(m.Ranges) == 0 {
		a, err := netip.ParseAddr(m.Host)
		if err != nil {
			return Mirror{}, fmt.Errorf("mirror %s: %s is a name: name the range(s) its addresses may fall in (--range 10.20.0.0/16); what a name resolves to can change", n, m.Host)
		}
		m.Ranges = []netip.Prefix{netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}
	}
	return m, nil
}

// Entry is the allow-list entry that grants the mirror's host.
func (m Mirror) Entry() Entry { return Entry{Host: m.Host, Port: m.Port} }

// RangeStrings are the ranges in canonical form.
func (m Mirror) RangeStrings() []string {
	out := make([]string, len(m.Ranges))
	for i, p := range m.Ranges {
		out[i] = p.String()
	}
	return out
}

// String is "NAME HOST[:PORT] RANGE RANGE…", ParseMirrorSpec's input.
func (m Mirror) String() string {
	return m.Name + " " + m.Entry().String() + " " + strings.Join(m.RangeStrings(), " ")
}

// ParseMirrorSpec reads the one-line form of a mirror, as the
// configuration's net.mirrors lists them: "NAME HOST[:PORT] [RANGE…]",
// the ranges separated by spaces or commas.
func ParseMirrorSpec(s string) (Mirror, error) {
	f := strings.Fields(s)
	if len(f) < 2 || len(f) > 2+MaxMirrorRanges {
		return Mirror{}, fmt.Errorf("mirror %q: want NAME HOST[:PORT] [RANGE…] (e.g. npm-corp npm.corp.example 10.20.0.0/16)", s)
	}
	var ranges []string
	for _, r := range f[2:] {
		ranges = append(ranges, strings.Split(r, ",")...)
	}
	return ParseMirror(f[0], f[1], ranges)
}

// sensitive reports whether a is an address a mirror reaches only through
// a range that is exactly it.
func sensitive(a netip.Addr) bool {
	return a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified()
}

// MirrorAdmits judges a forbidden address a the host (normalized) resolved
// to on port, against the mirrors: the mirror and the range that admit it,
// or ok false with why none does ("" when no mirror is for host and
// port). self reports the gateway's own addresses (nil: none).
func MirrorAdmits(mirrors []Mirror, host string, port int, a netip.Addr, self func(netip.Addr) bool) (m Mirror, r netip.Prefix, why string, ok bool) {
	a = a.WithZone("").Unmap()
	exact := sensitive(a) || (self != nil && self(a))
	for _, m := range mirrors {
		if m.Host != host || !m.Entry().Opens(port) {
			continue
		}
		for _, p := range m.Ranges {
			if !p.Contains(a) {
				continue
			}
			if exact && !(p.IsSingleIP() && p.Addr() == a) {
				why = fmt.Sprintf("mirror %s's range %s covers %s, but a loopback, link-local or gateway address needs a range of exactly that address", m.Name, p, a)
				continue
			}
			return m, p, "", true
		}
		if why == "" {
			why = fmt.Sprintf("not in the ranges of mirror %s (%s)", m.Name, strings.Join(m.RangeStrings(), ", "))
		}
	}
	return Mirror{}, netip.Prefix{}, why, false
}
