package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"sbx.dev/sbx/internal/testutil"
)

var guestInit struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// testInit builds the static guest init (testdata/guestinit) once per test
// process into its own directory.
func testInit(tb testing.TB) string {
	tb.Helper()
	testutil.SkipShort(tb, "boots a QEMU VM")
	guestInit.once.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-vm-init-")
		if err != nil {
			guestInit.err = err
			return
		}
		guestInit.path = filepath.Join(dir, "init")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", guestInit.path, "./testdata/guestinit")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		guestInit.out, guestInit.err = cmd.CombinedOutput()
	})
	if guestInit.err != nil {
		tb.Fatalf("build the guest init: %v\n%s", guestInit.err, guestInit.out)
	}
	return guestInit.path
}

func TestMain(m *testing.M) {
	if os.Getenv(gatewayHelperEnv) != "" {
		os.Exit(gatewayHelper())
	}
	code := m.Run()
	if guestInit.path != "" {
		os.RemoveAll(filepath.Dir(guestInit.path))
	}
	os.Exit(code)
}
