package podagent

import (
	"encoding/binary"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// isolateNetwork deletes every network interface but loopback from the
// container's network namespace and drops CAP_NET_ADMIN from the bounding
// set, so nothing the agent starts can bring a network back. A Pod always
// gets an interface from the cluster's CNI; a box without egress must have
// none (as a QEMU box has no NIC), whatever NetworkPolicy the CNI enforces
// or ignores. It needs CAP_NET_ADMIN, which the backend grants the box
// container for this one step.
func isolateNetwork() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("isolate network: %w", err)
	}
	var gone []string
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := deleteLink(i.Index); err != nil {
			return gone, fmt.Errorf("isolate network: delete %s: %w", i.Name, err)
		}
		gone = append(gone, i.Name)
	}
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_NET_ADMIN, 0, 0, 0); err != nil {
		return gone, fmt.Errorf("isolate network: drop CAP_NET_ADMIN: %w", err)
	}
	return gone, nil
}

// deleteLink sends RTM_DELLINK for ifindex over rtnetlink and waits for
// the kernel's answer.
func deleteLink(index int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	const hdr, ifi = unix.SizeofNlMsghdr, unix.SizeofIfInfomsg
	msg := make([]byte, hdr+ifi)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_DELLINK)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1)
	msg[hdr] = unix.AF_UNSPEC
	ne.PutUint32(msg[hdr+4:], uint32(index))
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
