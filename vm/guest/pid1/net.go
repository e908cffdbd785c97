package pid1

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The box's side of its one network path (vm/README.md, "Egress"). The
// gateway address is vm.EgressIP; guest does not import vm (a test checks
// they agree).
const (
	GuestIP      = "10.0.2.15"
	GatewayIP    = "10.0.2.100"
	GatewayName  = "sbx-gateway"
	guestNetmask = "255.255.255.0"
)

// setupNet configures the box's network device (QEMU user networking):
// GuestIP/24 on the first interface that is not lo, up. There is no default
// route on purpose: the only reachable address, GatewayIP, is on the link,
// and without a route a connection anywhere else fails at once with
// "network unreachable" instead of waiting for a SYN that QEMU's
// restrict=on drops.
func setupNet(wait time.Duration) (string, error) {
	nic, err := findNIC(wait)
	if err != nil {
		return "", err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("network: socket: %w", err)
	}
	defer unix.Close(fd)
	for _, a := range []struct {
		req  uint
		addr string
	}{{unix.SIOCSIFADDR, GuestIP}, {unix.SIOCSIFNETMASK, guestNetmask}} {
		ifr, err := unix.NewIfreq(nic)
		if err != nil {
			return "", fmt.Errorf("network: %s: %w", nic, err)
		}
		if err := ifr.SetInet4Addr(netip.MustParseAddr(a.addr).AsSlice()); err != nil {
			return "", fmt.Errorf("network: %s: %w", nic, err)
		}
		if err := unix.IoctlIfreq(fd, a.req, ifr); err != nil {
			return "", fmt.Errorf("network: set %s on %s: %w", a.addr, nic, err)
		}
	}
	if err := ifUp(fd, nic); err != nil {
		return "", fmt.Errorf("network: %w", err)
	}
	return nic, nil
}

// findNIC waits up to wait for a network interface other than lo.
func findNIC(wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if e.Name() != "lo" {
				return e.Name(), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("network: no interface under /sys/class/net after %s (sbx.net=1 but no virtio-net device, or a kernel without CONFIG_VIRTIO_NET)", wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ifUp sets the interface up.
func ifUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get %s flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// writeNetFiles names the gateway in root's /etc/hosts and leaves the box
// without a DNS resolver: resolv.conf holds only a comment, so a lookup
// goes to 127.0.0.1 and fails at once (names are resolved by the gateway's
// proxy).
func writeNetFiles(root string) error {
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	hosts := filepath.Join(etc, "hosts")
	old, err := os.ReadFile(hosts)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("network: %w", err)
	}
	if err := replaceFile(hosts, HostsWithGateway(old), 0o644); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := replaceFile(filepath.Join(etc, "resolv.conf"),
		[]byte("# sbx: no DNS inside a box; the gateway resolves names (HTTP proxy at "+GatewayName+").\n"), 0o644); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}

// replaceFile writes data to a fresh file (mode perm) renamed over path,
// so a symlink at path (Debian images may link resolv.conf elsewhere) is
// replaced, not followed.
func replaceFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".sbx-tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if err := os.Chmod(tmp, perm); err != nil { // a leftover tmp keeps its old mode
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// HostsWithGateway returns an /etc/hosts with exactly one line for
// GatewayName (GatewayIP), every other line of old kept, and a localhost
// line when old had none.
func HostsWithGateway(old []byte) []byte {
	var out bytes.Buffer
	localhost := false
	for _, line := range strings.Split(string(old), "\n") {
		f := strings.Fields(strings.SplitN(line, "#", 2)[0])
		if len(f) >= 2 && contains(f[1:], GatewayName) {
			continue
		}
		if len(f) >= 2 && f[0] == "127.0.0.1" && contains(f[1:], "localhost") {
			localhost = true
		}
		if line != "" {
			out.WriteString(line + "\n")
		}
	}
	if !localhost {
		out.WriteString("127.0.0.1\tlocalhost\n")
	}
	out.WriteString(GatewayIP + "\t" + GatewayName + "\n")
	return out.Bytes()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
