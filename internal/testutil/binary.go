package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var sbx struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// GuestBinary builds the real static guest binary once per test process
// (sbx built with the tag "guest": the box's init and agent, the hooks, the
// guest side of a run and the script agent, the egress forwarder), exactly
// as `go tool -modfile=tools/go.mod task build` makes bin/sbx-guest, and returns its path;
// SBX_TEST_BINARY names a prebuilt one instead.
func GuestBinary(t testing.TB) string {
	t.Helper()
	sbx.once.Do(func() {
		if p := os.Getenv("SBX_TEST_BINARY"); p != "" {
			sbx.path = p
			return
		}
		_, here, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(here), "..", "..")
		dir, err := os.MkdirTemp("", "sbx-test-bin-")
		if err != nil {
			sbx.err = err
			return
		}
		sbx.path = filepath.Join(dir, "sbx-guest")
		cmd := exec.Command("go", "build", "-tags", "guest", "-trimpath", "-ldflags=-s -w", "-o", sbx.path, ".")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		sbx.out, sbx.err = cmd.CombinedOutput()
	})
	if sbx.err != nil {
		t.Fatalf("build sbx: %v\n%s", sbx.err, sbx.out)
	}
	return sbx.path
}

// RemoveGuestBinary deletes the binary GuestBinary built (call from TestMain).
func RemoveGuestBinary() {
	if sbx.path != "" && os.Getenv("SBX_TEST_BINARY") == "" {
		os.RemoveAll(filepath.Dir(sbx.path))
	}
}

// NoSecretScript searches a box for a secret given on its stdin: files
// created or changed since the box booted (the read-only image predates the
// test and a copy cannot preserve ctime) and every process environment. It
// prints "hits:" followed by what holds it. The secret travels on stdin, so
// the search holds it in no environment or file.
const NoSecretScript = `read -r T
hits=$(find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -cmin -60 -print0 | xargs -0 -r grep -lF -e "$T" 2>/dev/null)
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null | grep -qF -e "$T" && hits="$hits $f"; done
echo "hits:$hits"`

// DataDirWithImages makes a data dir that borrows the checkout's built
// kernel and agent image (from SBX_DATA or ../.sbx relative to the test's
// package), as `go tool -modfile=tools/go.mod task kernel` and `go tool -modfile=tools/go.mod task image` install them.
func DataDirWithImages(t testing.TB, pkgToRoot string) string {
	t.Helper()
	SkipShort(t, "boots QEMU boxes from the agent image")
	src := ""
	for _, d := range []string{os.Getenv("SBX_DATA"), filepath.Join(pkgToRoot, ".sbx")} {
		if d == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "images", "agent.ext4")); err == nil {
			src, _ = filepath.Abs(d)
			break
		}
	}
	if src == "" {
		t.Fatal("the agent image is missing: run `go tool -modfile=tools/go.mod task image` (go tool -modfile=tools/go.mod task test does)")
	}
	data := t.TempDir()
	for _, d := range []string{"images", "kernel"} {
		if err := os.Symlink(filepath.Join(src, d), filepath.Join(data, d)); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(src, "accel.json")); err == nil {
		_ = os.WriteFile(filepath.Join(data, "accel.json"), b, 0o600)
	}
	return data
}
