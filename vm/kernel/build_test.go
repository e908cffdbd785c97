package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kernel.sh must refuse a .config that lost any line of kernel.config,
// naming the option, and accept one that kept them all.
func TestKernelConfigVerify(t *testing.T) {
	script, err := filepath.Abs("../build/kernel.sh")
	if err != nil {
		t.Fatal(err)
	}
	frag, err := os.ReadFile("../build/kernel.config")
	if err != nil {
		t.Fatal(err)
	}
	// A .config that is exactly the fragment keeps every option.
	good := string(frag)
	verify := func(config string) (string, error) {
		path := filepath.Join(t.TempDir(), ".config")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("bash", script, "verify", path).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(good); err != nil {
		t.Fatalf("verify of the fragment itself failed: %v\n%s", err, out)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"option dropped", "CONFIG_VIRTIO_BLK=y\n", "", "want 'CONFIG_VIRTIO_BLK=y', got '<absent>'"},
		{"option turned off", "CONFIG_FUTEX=y\n", "# CONFIG_FUTEX is not set\n", "want 'CONFIG_FUTEX=y'"},
		{"unwanted option on", "# CONFIG_MODULES is not set\n", "CONFIG_MODULES=y\n", "want '# CONFIG_MODULES is not set', got 'CONFIG_MODULES=y'"},
		{"string changed", `CONFIG_LOCALVERSION="-sbx"` + "\n", `CONFIG_LOCALVERSION=""` + "\n", `want 'CONFIG_LOCALVERSION="-sbx"'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(good, tc.from) {
				t.Fatalf("kernel.config lacks %q", tc.from)
			}
			out, err := verify(strings.Replace(good, tc.from, tc.to, 1))
			if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "did not survive") {
				t.Fatalf("verify = %v\n%s\nwant failure naming %q", err, out, tc.want)
			}
		})
	}
	// The installed small kernel's own config, when built, passes too.
	if b, err := os.ReadFile(filepath.Join(projectDataDir(t), "kernel", "small", "config")); err == nil {
		if out, err := verify(string(b)); err != nil {
			t.Errorf("installed small kernel config fails verify: %v\n%s", err, out)
		}
	}
}
