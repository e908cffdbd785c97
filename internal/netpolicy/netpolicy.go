// Package netpolicy is the box network's address policy, the one the
// gateway applies to every connection it makes on a box's behalf: the egress
// proxy's destinations and the upstreams of the git, model and MCP
// endpoints. It also holds the one parser of the entries that open it: a
// box's allow-list entries (the core cleans them with it, boxnet matches
// with it) and the operator's trusted private upstreams (config validates
// them with it, boxnet and the core apply them).
//
// Forbidden addresses: loopback, RFC 1918, link-local (cloud metadata
// included), CGNAT, this-network, documentation, benchmarking, multicast,
// reserved, and their IPv6 forms (IPv4-mapped, NAT64 and 6to4 judged by the
// IPv4 address they embed; unique local, site-local, link-local, anything
// outside global unicast). They are refused after resolution whatever a
// box's allow-list says; only a Trust (operator configuration, never a
// user's) reopens one, for the upstreams only.
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
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
// first, in Forbidden.
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
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// MaxNameLen bounds a host name.
const MaxNameLen = 253

// Forbidden returns "" when the gateway may connect to a on a box's
// behalf, or why not ("loopback address", ...).
func Forbidden(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid address"
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return Forbidden(a.Unmap())
	}
	if a.Is4() {
		for _, b := range blocked4 {
			if b.prefix.Contains(a) {
				return b.reason
			}
		}
		return ""
	}
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if r := Forbidden(v4); r != "" {
			return "NAT64 of " + v4.String() + ": " + r
		}
		return ""
	}
	if sixToFour.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
		if r := Forbidden(v4); r != "" {
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

// Refused returns "" when the gateway may connect to ap on a box's behalf,
// or why not ("127.0.0.1 is a loopback address"): a forbidden address is
// refused unless trusted lists it.
func Refused(ap netip.AddrPort, trusted []Trust) string {
	a := ap.Addr().WithZone("")
	r := Forbidden(a)
	if r == "" || Trusted(trusted, ap) {
		return ""
	}
	return a.String() + " is a " + r
}

// Host lowercases a destination name and drops one trailing dot; it
// returns "" for anything that is not a plausible DNS name or IP literal, so
// that odd spellings cannot slip past a check. An IP literal comes back in
// its canonical form (IPv6 without brackets).
func Host(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if h == "" || len(h) > MaxNameLen {
		return ""
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return ""
		}
		return a.String()
	}
	for label := range strings.SplitSeq(h, ".") {
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

// isAddr reports whether a normalized host is an IP literal.
func isAddr(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// Default ports: what an allow-list entry without a port opens.
const (
	PortHTTP  = 80
	PortHTTPS = 443
)

// Entry is one egress allow-list entry.
type Entry struct {
	// Host is a normalized name or IP literal; for a wildcard the suffix.
	Host string
	// Wildcard: the entry "*.Host" matches the names strictly below Host,
	// not Host itself.
	Wildcard bool
	// Port is the one port the entry opens; 0 means PortHTTP and PortHTTPS.
	Port int
}

// maxEntryLen bounds an entry: "*." + a name + ":65535".
const maxEntryLen = 2 + MaxNameLen + 6

// ParseEntry reads an allow-list entry: "example.com", "*.example.com", an
// IP literal ("1.2.3.4", "2001:db8::1", "[2001:db8::1]"), each optionally
// with ":PORT" ("example.com:8443", "*.example.com:8443",
// "[2001:db8::1]:8443"). Case, surrounding space and one trailing dot of the
// name do not matter; String gives the canonical form.
func ParseEntry(s string) (Entry, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > maxEntryLen {
		return Entry{}, errors.New("want a host name like example.com or *.example.com, optionally with :PORT")
	}
	host, port, hasPort := s, "", false
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Entry{}, errors.New("unclosed [ of an IPv6 address")
		}
		host, port = s[:end+1], s[end+1:]
		if port != "" {
			if port, hasPort = strings.CutPrefix(port, ":"); !hasPort {
				return Entry{}, errors.New("want [IPv6]:PORT")
			}
		}
	case strings.Count(s, ":") == 1:
		host, port, hasPort = strings.Cut(s, ":")
	}
	var e Entry
	if hasPort {
		p, err := parsePort(port)
		if err != nil {
			return Entry{}, err
		}
		e.Port = p
	}
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		e.Wildcard, host = true, suffix
	}
	e.Host = Host(host)
	switch {
	case e.Host == "":
		return Entry{}, errors.New("want a host name like example.com or *.example.com, or an IP address, optionally with :PORT")
	case e.Wildcard && isAddr(e.Host):
		return Entry{}, errors.New("a wildcard covers names below a domain, not an address")
	case strings.HasPrefix(host, "[") && !isAddr(e.Host):
		return Entry{}, errors.New("only an IPv6 address goes in [ ]")
	}
	return e, nil
}

// parsePort reads a port number, digits only, 1 to 65535.
func parsePort(s string) (int, error) {
	bad := fmt.Errorf("port %q: want 1 to 65535", s)
	if s == "" || len(s) > 5 {
		return 0, bad
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, bad
	}
	return p, nil
}

// String is the canonical form ParseEntry reads back to the same Entry.
func (e Entry) String() string {
	h := e.Host
	if e.Wildcard {
		h = "*." + h
	}
	if e.Port == 0 {
		return h
	}
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(e.Port)
}

// Covers reports whether the entry names a normalized host.
func (e Entry) Covers(host string) bool {
	if host == "" {
		return false
	}
	if !e.Wildcard {
		return host == e.Host
	}
	return strings.HasSuffix(host, "."+e.Host) && !isAddr(host)
}

// Opens reports whether the entry opens port.
func (e Entry) Opens(port int) bool {
	if e.Port == 0 {
		return DefaultPort(port)
	}
	return port == e.Port
}

// DefaultPort reports whether port is one an entry without a port opens.
func DefaultPort(port int) bool { return port == PortHTTP || port == PortHTTPS }

// Admit matches a normalized host and a port against allow-list entries:
// listed when an entry names the host, open when one of those also opens
// the port. Entries that do not parse match nothing.
func Admit(entries []string, host string, port int) (listed, open bool) {
	for _, s := range entries {
		e, err := ParseEntry(s)
		if err != nil || !e.Covers(host) {
			continue
		}
		listed = true
		if e.Opens(port) {
			return true, true
		}
	}
	return listed, false
}

// Trust is one private upstream the operator trusts: a prefix of
// addresses, on one port or (Port 0) all.
type Trust struct {
	Prefix netip.Prefix
	Port   int
}

// ParseTrust reads a trusted private upstream: a CIDR prefix
// ("10.20.0.0/16", "fd00:1::/64"), an address ("10.1.2.3") or an
// address:port ("127.0.0.1:8080", "[::1]:8080"). Names are not accepted:
// what a name resolves to can change.
func ParseTrust(s string) (Trust, error) {
	s = strings.TrimSpace(s)
	bad := errors.New("want a CIDR prefix (10.20.0.0/16), an address (10.1.2.3) or address:port (127.0.0.1:8080, [::1]:8080); not a name, list the addresses it resolves to")
	if strings.Contains(s, "%") {
		return Trust{}, bad
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return Trust{}, bad
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return Trust{}, bad
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return Trust{Prefix: p.Masked()}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return Trust{}, bad
		}
		a := ap.Addr().Unmap()
		return Trust{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: int(ap.Port())}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return Trust{}, bad
	}
	a = a.Unmap()
	return Trust{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
}

// String is the canonical form ParseTrust reads back to the same Trust.
func (t Trust) String() string {
	if t.Port == 0 {
		if t.Prefix.IsSingleIP() {
			return t.Prefix.Addr().String()
		}
		return t.Prefix.String()
	}
	return netip.AddrPortFrom(t.Prefix.Addr(), uint16(t.Port)).String()
}

// ParseTrusts reads a list of trusted private upstreams; the error names
// the bad entry.
func ParseTrusts(entries []string) ([]Trust, error) {
	var out []Trust
	for _, s := range entries {
		t, err := ParseTrust(s)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// Trusted reports whether ap is a trusted private upstream.
func Trusted(trusted []Trust, ap netip.AddrPort) bool {
	a := ap.Addr().WithZone("").Unmap()
	for _, t := range trusted {
		if t.Prefix.Contains(a) && (t.Port == 0 || t.Port == int(ap.Port())) {
			return true
		}
	}
	return false
}

// URLPort is the port a URL names, or its scheme's default (80 for http,
// else 443); 0 when the port is not a number in range.
func URLPort(u *url.URL) int {
	p := u.Port()
	if p == "" {
		if u.Scheme == "http" {
			return PortHTTP
		}
		return PortHTTPS
	}
	n, err := parsePort(p)
	if err != nil {
		return 0
	}
	return n
}

// CheckUpstream judges an upstream URL's host without DNS, at registration
// and at configuration load: a malformed host, a name for loopback
// ("localhost", "*.localhost") and a forbidden address not in trusted are
// refused. A name is judged again, by what it resolves to, on every dial.
func CheckUpstream(u *url.URL, trusted []Trust) error {
	host := Host(u.Hostname())
	port := URLPort(u)
	switch {
	case host == "":
		return errors.New("the host is not a DNS name or an IP address")
	case port == 0:
		return errors.New("the port is not a number from 1 to 65535")
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return fmt.Errorf("%s is a loopback name", host)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if r := Refused(netip.AddrPortFrom(a, uint16(port)), trusted); r != "" {
		return errors.New(r)
	}
	return nil
}

// LoopbackTrust trusts the loopback addresses (127.0.0.0/8, ::1) on every
// port: what tests of the egress proxy need to reach local servers. No
// configuration gives it to the egress proxy.
func LoopbackTrust() []Trust {
	return []Trust{{Prefix: netip.MustParsePrefix("127.0.0.0/8")}, {Prefix: netip.MustParsePrefix("::1/128")}}
}
