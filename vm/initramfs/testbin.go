package initramfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// maxTestBinary bounds the static sbx a test box boots as /init: it is
// unpacked into the box's RAM, and a binary that outgrows this is the
// linker keeping dead code (a text/template or MethodByName made
// reachable), which broke the stock-kernel boots at 256 MiB.
const maxTestBinary = 60 << 20

var testBinary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// BuildTestBinary builds sbx.dev/sbx statically (CGO_ENABLED=0, stripped)
// once per test process and returns its path: the /init of test boxes.
func BuildTestBinary(tb testing.TB) string {
	tb.Helper()
	// testutil.SkipShort's check, inline: this file ships in the package,
	// which must not link the test helpers.
	if testing.Short() {
		tb.Skip("-short: links the whole static sbx (~40 s) for a QEMU box's /init")
	}
	testBinary.once.Do(func() {
		// One shared directory (no leak per run); each process builds its own
		// file and renames it into place, so concurrent runs never see half a binary.
		dir := filepath.Join(os.TempDir(), "sbx-testinit")
		if testBinary.err = os.MkdirAll(dir, 0o755); testBinary.err != nil {
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".sbx-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, "sbx.dev/sbx")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if testBinary.out, testBinary.err = cmd.CombinedOutput(); testBinary.err != nil {
			os.Remove(tmp)
			return
		}
		if fi, err := os.Stat(tmp); err == nil && fi.Size() > maxTestBinary {
			os.Remove(tmp)
			testBinary.err = fmt.Errorf("the static sbx is %d MiB, over %d MiB: the linker kept dead code (a text/template Execute or reflect MethodByName reachable, e.g. cobra's SetVersionTemplate)", fi.Size()>>20, maxTestBinary>>20)
			return
		}
		testBinary.path = filepath.Join(dir, "sbx")
		testBinary.err = os.Rename(tmp, testBinary.path)
	})
	if testBinary.err != nil {
		tb.Fatalf("build the sbx test binary: %v\n%s", testBinary.err, testBinary.out)
	}
	return testBinary.path
}
