package podagent

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// isolateNetwork deletes every network interface but loopback from the
// container's network namespace, puts gateway (when valid) on loopback for
// the egress listener, and drops CAP_NET_ADMIN from the bounding set, so
// nothing the agent starts can bring a network back. A Pod always gets an
// interface from the cluster's CNI; a box must have none (as a QEMU box has
// no NIC, or only its restricted one), whatever NetworkPolicy the CNI
// enforces or ignores: its one way out is the agent's egress listener,
// carried to a gateway through the API server (see egress.go). It needs
// CAP_NET_ADMIN, which the backend grants the box container for this one
// step.
func isolateNetwork(gateway netip.Addr) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("isolate network: %w", err)
	}
	var gone []string
	lo := -1
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			lo = i.Index
			continue
		}
		if err := deleteLink(i.Index); err != nil {
			return gone, fmt.Errorf("isolate network: delete %s: %w", i.Name, err)
		}
		gone = append(gone, i.Name)
	}
	if gateway.IsValid() {
		if lo < 0 {
			return gone, fmt.Errorf("isolate network: no loopback interface for %s", gateway)
		}
		if err := addAddress(lo, gateway); err != nil {
			return gone, fmt.Errorf("isolate network: add %s to loopback: %w", gateway, err)
		}
	}
	if err := dropBoundingCap(unix.CAP_NET_ADMIN); err != nil {
		return gone, fmt.Errorf("isolate network: drop CAP_NET_ADMIN: %w", err)
	}
	return gone, nil
}

// dropBoundingCap drops capability c from the bounding set of every thread
// of the process. The bounding set is per thread, and the agent forks a
// box's processes from whichever thread the Go runtime runs it on: a
// prctl on one thread leaves the capability to children of the others.
func dropBoundingCap(c uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0)
	switch errno {
	case 0:
		return nil
	case syscall.ENOTSUP:
		return fmt.Errorf("%w: the sbx binary must be built with CGO_ENABLED=0 to change every thread's capabilities", errno)
	}
	return errno
}

// deleteLink sends RTM_DELLINK for ifindex.
func deleteLink(index int) error {
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	msg[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(msg[unix.SizeofNlMsghdr+4:], uint32(index))
	return rtnetlink(unix.RTM_DELLINK, 0, msg)
}

// addAddress sends RTM_NEWADDR for addr/32 (IPv4) or /128 on ifindex, as
// `ip addr add` does.
func addAddress(index int, addr netip.Addr) error {
	ip := addr.AsSlice()
	family, bits := unix.AF_INET, 32
	if addr.Is6() {
		family, bits = unix.AF_INET6, 128
	}
	const hdr, ifa, rta = unix.SizeofNlMsghdr, unix.SizeofIfAddrmsg, unix.SizeofRtAttr
	attr := rta + len(ip) // 4- and 16-byte addresses need no padding
	msg := make([]byte, hdr+ifa+2*attr)
	ne := binary.NativeEndian
	msg[hdr] = byte(family)
	msg[hdr+1] = byte(bits)
	ne.PutUint32(msg[hdr+4:], uint32(index))
	for i, typ := range []uint16{unix.IFA_LOCAL, unix.IFA_ADDRESS} {
		off := hdr + ifa + i*attr
		ne.PutUint16(msg[off:], uint16(attr))
		ne.PutUint16(msg[off+2:], typ)
		copy(msg[off+rta:], ip)
	}
	return rtnetlink(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, msg)
}

// rtnetlink fills msg's header (typ, flags plus request and ack), sends it
// over rtnetlink and waits for the kernel's answer.
func rtnetlink(typ uint16, flags uint16, msg []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	const hdr = unix.SizeofNlMsghdr
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	ne.PutUint32(msg[8:], 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n < hdr+4 || ne.Uint16(buf[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("rtnetlink: unexpected answer (%d bytes)", n)
	}
	if errno := int32(ne.Uint32(buf[hdr:])); errno != 0 {
		return syscall.Errno(-errno)
	}
	return nil
}
