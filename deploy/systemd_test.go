// Package deploy holds the deployment files (the kustomize base, the
// gateway image's build, the systemd unit); its tests check the parts no
// cluster is needed for. gateway.TestClusterDeploy applies the base.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit: systemd accepts systemd/sbx.service as written (every
// directive known, every value valid), and its hardening stays where it is:
// systemd-analyze security rates its exposure 4.0 or less of 10 (3.5 now).
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze: ", err)
	}
	raw, err := os.ReadFile("systemd/sbx.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify wants ExecStart's program to exist: any executable will do.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const exec0 = "ExecStart=/usr/local/bin/sbx serve"
	if !strings.Contains(string(raw), "\n"+exec0+"\n") {
		t.Fatalf("systemd/sbx.service has no %q line", exec0)
	}
	unit := filepath.Join(t.TempDir(), "sbx.service")
	if err := os.WriteFile(unit, []byte(strings.Replace(string(raw), exec0, "ExecStart="+exe+" serve", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--threshold=40", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v (exposure above 4.0)\n%s", err, out)
	}
	if i := strings.Index(string(out), "Overall exposure level"); i >= 0 {
		t.Log(strings.TrimSpace(string(out[i:])))
	}
}
