package pid1

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Regression: a gateway running as PID 1 in a container must not become a
// guest init; only the kernel's /init is.
func TestIsInitNeedsKernelName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/init"}, true},
		{[]string{"/usr/local/bin/sbx", "serve"}, false},
		{[]string{"sbx"}, false},
		{nil, false},
	} {
		if got := isInitName(tc.args); got != tc.want {
			t.Errorf("isInitName(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
	if IsInit() {
		t.Error("the test process is not a box init")
	}
}

// Regression (init stderr on /dev/null): the init replaces the runtime's
// /dev/null stand-ins and closed fds with the console, never a real file.
func TestReplaceableFD(t *testing.T) {
	null, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	closed, err := unix.Dup(int(file.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(closed)
	for _, tc := range []struct {
		name string
		fd   int
		want bool
	}{
		{"/dev/null", int(null.Fd()), true},
		{"regular file", int(file.Fd()), false},
		{"closed", closed, true},
	} {
		if got := replaceableFD(tc.fd); got != tc.want {
			t.Errorf("replaceableFD(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
