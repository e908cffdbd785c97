package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestRegressionKilledMachineBlamesItsConsole: a machine killed from
// outside (kill -9, the OOM killer) failed with its console's last line as
// the reason ("genirq: Flags mismatch irq 8…", a boot message): the reason
// now says it was killed, and keeps the console's word for a machine that
// stopped on its own (found by the fault suite, "QEMU kill -9 while running").
func TestRegressionKilledMachineBlamesItsConsole(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, consoleFile), []byte("genirq: Flags mismatch irq 8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "qemu.log")
	for _, tc := range []struct {
		name, script string
		kill         bool
		want, not    string
	}{
		{"killed", "sleep 30", true, "killed from outside sbx", "genirq"},
		{"stopped on its own", "exit 1", false, "genirq: Flags mismatch irq 8", "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := startProc("/bin/sh", []string{"-c", tc.script}, logPath)
			if err != nil {
				t.Fatal(err)
			}
			if tc.kill {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the process did not end")
			}
			msg := p.exitErr().Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.not) {
				t.Fatalf("reason %q: want %q, not %q", msg, tc.want, tc.not)
			}
		})
	}
}

// TestMemPathOf: recovery names the memory a re-adopted machine maps again
// after an interrupted sleep from its command line.
func TestMemPathOf(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"qemu-system-x86_64", "-object", "memory-backend-file,id=ram,size=512M,mem-path=/dev/shm/sbx-1/b.1.ram,share=on"}, "/dev/shm/sbx-1/b.1.ram"},
		{[]string{"qemu-system-x86_64", "-m", "512"}, ""},
		{nil, ""},
		{[]string{"-object", "memory-backend-ram,id=ram,size=1G"}, ""},
	} {
		if got := memPathOf(tc.argv); got != tc.want {
			t.Errorf("memPathOf(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}
