package vm

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestDoctor runs the real checks on this host: QEMU and a kernel are
// installed here, so every required line must pass and the accelerator line
// must say which and why.
func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	checks := Diagnose(context.Background(), dir)
	var out bytes.Buffer
	ok := PrintChecks(&out, checks)
	t.Log("\n" + out.String())
	if !ok {
		t.Fatalf("doctor failed on a host with QEMU and a kernel:\n%s", out.String())
	}
	for _, name := range []string{"qemu", "kernel", "accelerator", "busybox", "initramfs", "mkfs.ext4", "qemu-img", "agent image"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("no %s line", name)
		}
	}
	if !strings.Contains(out.String(), "tcg: ") && !strings.Contains(out.String(), "kvm: ") {
		t.Errorf("accelerator line names neither kvm nor tcg")
	}
}

func TestDoctorCommandBadArgs(t *testing.T) {
	cmd := NewDoctorCommand()
	cmd.SetArgs([]string{"extra"})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil {
		t.Fatal("doctor accepted an argument")
	}
}
