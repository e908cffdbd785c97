package qemu

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestQMPPathOf: recovery kills processes by what qmpPathOf finds, so only
// a QEMU's own -qmp argument may count.
func TestQMPPathOf(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/bin/qemu-system-x86_64", "-qmp", "unix:/d/boxes/a/qmp.sock,server=on,wait=off"}, "/d/boxes/a/qmp.sock"},
		{[]string{"qemu-system-x86_64", "-name", "x", "-qmp", "unix:/d/run/ab/qmp.sock"}, "/d/run/ab/qmp.sock"},
		{[]string{"/bin/sh", "-c", "qemu-system-x86_64 -qmp unix:/d/boxes/a/qmp.sock"}, ""},
		{[]string{"/usr/bin/vim", "-qmp", "unix:/d/boxes/a/qmp.sock"}, ""},
		{[]string{"/usr/bin/qemu-system-x86_64", "-qmp"}, ""},
		{[]string{"/usr/bin/qemu-system-x86_64"}, ""},
		{nil, ""},
	} {
		if got := qmpPathOf(tc.argv); got != tc.want {
			t.Errorf("qmpPathOf(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}

func FuzzQMPPathOf(f *testing.F) {
	f.Add("/usr/bin/qemu-system-x86_64\x00-qmp\x00unix:/d/boxes/a/qmp.sock,server=on")
	f.Add("/bin/sh\x00-qmp\x00unix:/d/boxes/a/qmp.sock")
	f.Fuzz(func(t *testing.T, cmdline string) {
		argv := strings.Split(cmdline, "\x00")
		got := qmpPathOf(argv)
		if got == "" {
			return
		}
		if !strings.HasPrefix(filepath.Base(argv[0]), "qemu-system") {
			t.Fatalf("path %q from a non-QEMU argv %q", got, argv)
		}
		if strings.Contains(got, ",") {
			t.Fatalf("options leaked into the path: %q", got)
		}
	})
}

func TestCPUTicksAndMemory(t *testing.T) {
	if _, err := cpuTicks(1 << 30); err == nil {
		t.Error("cpuTicks of a missing pid succeeded")
	}
	if _, err := privateBytes(1 << 30); err == nil {
		t.Error("privateBytes of a missing pid succeeded")
	}
}
