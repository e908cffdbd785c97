package vm

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestDoctor runs the real checks on this host: QEMU and a kernel are
// installed here, so every required line must pass and the accelerator line
// must say which and why.
func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	checks, err := Diagnose(context.Background(), dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
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

// TestDoctorCommandProgress: the first doctor on a machine (an empty build
// cache) and data dir says on stderr that it probes KVM and how that ended;
// the second, with the verdict cached, says nothing there, and neither does
// one on a new data dir (the verdict is the machine's). Stdout stays the
// table.
func TestDoctorCommandProgress(t *testing.T) {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		t.Skipf("no usable /dev/kvm, so no probe boot: %v", err)
	} else {
		f.Close()
	}
	t.Setenv("SBX_CACHE", t.TempDir())
	dir := t.TempDir()
	run := func() (stdout, stderr string) {
		var out, errOut bytes.Buffer
		cmd := NewDoctorCommand()
		cmd.SetArgs([]string{"--data", dir})
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("doctor: %v\n%s%s", err, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	out, progress := run()
	for _, want := range []string{`msg="probing KVM (a test boot)" up_to=20s` + "\n", `msg="KVM probe done" accel=`, " took="} {
		if !strings.Contains(progress, want) {
			t.Errorf("first doctor's stderr lacks %q:\n%s", want, progress)
		}
	}
	if strings.Contains(progress, "time=") || strings.Contains(out, "probing") {
		t.Errorf("progress lines carry a timestamp or went to stdout:\nstdout %s\nstderr %s", out, progress)
	}
	if _, progress := run(); progress != "" {
		t.Errorf("second doctor (verdict cached) printed progress:\n%s", progress)
	}
	dir = t.TempDir()
	if _, progress := run(); progress != "" {
		t.Errorf("doctor on a new data dir probed again despite the machine's verdict:\n%s", progress)
	}
}
