package boxnet

import (
	"net"
	"net/netip"
	"slices"
	"strings"

	"sbx.dev/sbx/internal/netpolicy"
)

// mirrorException reconsiders a destination the address policy refused: a
// name the box's allow-list grants whose addresses fall in an admin's
// internal mirror's ranges (netpolicy.MirrorAdmits). Every address must
// pass, by the policy or by the mirror; the reason names the mirror and
// the range when it does, and why not when it does not.
func (s *Server) mirrorException(v *egressVerdict, mirrors []netpolicy.Mirror) {
	var used []string
	var local []netip.Addr
	self := func(a netip.Addr) bool {
		if local == nil {
			local = s.cfg.LocalAddrs()
			if local == nil {
				local = []netip.Addr{}
			}
		}
		return slices.Contains(local, a)
	}
	for _, a := range v.all {
		ap := netip.AddrPortFrom(a, uint16(v.port))
		r := netpolicy.Refused(ap, s.cfg.EgressTrust)
		if r == "" {
			continue
		}
		m, p, why, ok := netpolicy.MirrorAdmits(mirrors, v.host, v.port, a, self)
		if !ok {
			v.ok, v.addrs, v.reason = false, []netip.Addr{a}, r
			if why != "" {
				v.reason = r + " (" + why + ")"
			}
			return
		}
		used = append(used, a.String()+" in "+p.String()+" of mirror "+m.Name)
	}
	v.ok, v.addrs = true, v.all
	v.reason = "on the box's allow-list; internal mirror exception (admin): " + strings.Join(used, ", ")
}

// interfaceAddrs are the addresses of the gateway host's interfaces.
func interfaceAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ifs))
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}
