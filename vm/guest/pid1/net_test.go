package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostsWithGateway(t *testing.T) {
	const gw = "10.0.2.100\tsbx-gateway\n"
	for _, tc := range []struct {
		name, old, want string
	}{
		{"none", "", "127.0.0.1\tlocalhost\n" + gw},
		{"debian", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n",
			"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n" + gw},
		{"no trailing newline", "127.0.0.1 localhost", "127.0.0.1 localhost\n" + gw},
		// A stale or planted line for the name must not win over ours.
		{"planted", "127.0.0.1 localhost\n203.0.113.9 sbx-gateway evil\n", "127.0.0.1 localhost\n" + gw},
		{"alias", "1.2.3.4 other sbx-gateway\n", "127.0.0.1\tlocalhost\n" + gw},
		{"rewritten twice", "127.0.0.1\tlocalhost\n" + gw, "127.0.0.1\tlocalhost\n" + gw},
		{"comment mentions it", "# sbx-gateway is ours\n127.0.0.1 localhost\n", "# sbx-gateway is ours\n127.0.0.1 localhost\n" + gw},
		{"similar name kept", "127.0.0.1 localhost\n1.2.3.4 sbx-gateway2\n", "127.0.0.1 localhost\n1.2.3.4 sbx-gateway2\n" + gw},
	} {
		if got := string(HostsWithGateway([]byte(tc.old))); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzHostsWithGateway: whatever the image's hosts file says, the result
// names the gateway exactly once, with our address.
func FuzzHostsWithGateway(f *testing.F) {
	f.Add("127.0.0.1 localhost\n")
	f.Add("1.1.1.1 sbx-gateway\n1.1.1.1\tsbx-gateway # x")
	f.Fuzz(func(t *testing.T, old string) {
		n := 0
		for _, line := range strings.Split(string(HostsWithGateway([]byte(old))), "\n") {
			f := strings.Fields(strings.SplitN(line, "#", 2)[0])
			if len(f) >= 2 && contains(f[1:], GatewayName) {
				n++
				if f[0] != GatewayIP {
					t.Fatalf("gateway line %q", line)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d gateway lines from %q", n, old)
		}
	})
}

// A resolv.conf that is a symlink (systemd-resolved style) is replaced, not
// written through.
func TestWriteNetFilesReplacesSymlink(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, []byte("nameserver 1.1.1.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if err := os.Symlink(outside, filepath.Join(root, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := writeNetFiles(root); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "nameserver 1.1.1.1\n" {
		t.Fatalf("symlink target written: %q", b)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc", "resolv.conf"))
	if err != nil || strings.Contains(string(b), "nameserver") {
		t.Fatalf("resolv.conf %q, %v", b, err)
	}
	h, _ := os.ReadFile(filepath.Join(root, "etc", "hosts"))
	if !strings.Contains(string(h), "10.0.2.100\tsbx-gateway\n") {
		t.Fatalf("hosts %q", h)
	}
}
