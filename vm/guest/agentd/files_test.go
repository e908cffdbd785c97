package agentd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// FuzzResolve: whatever the path, Rel plus openat2 either fails or opens
// something inside the root — through .., absolute and relative symlinks,
// chains and /proc magic links.
func FuzzResolve(f *testing.F) {
	root := f.TempDir()
	outside := f.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.MkdirAll(filepath.Join(root, "a/b"), 0o755)
	os.WriteFile(filepath.Join(root, "a/b/f"), []byte("f"), 0o644)
	os.Symlink("/etc", filepath.Join(root, "etc"))
	os.Symlink(outside, filepath.Join(root, "out"))
	os.Symlink("../..", filepath.Join(root, "a/up"))
	os.Symlink("up/..", filepath.Join(root, "a/chain"))
	os.Symlink("b/f", filepath.Join(root, "a/in"))
	os.Symlink("/proc/self/root", filepath.Join(root, "magic"))
	os.Symlink("/proc/self/cwd", filepath.Join(root, "cwd"))
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	for _, s := range []string{"a/b/f", "a/in", "etc/passwd", "out/secret", "a/up/x", "a/chain/etc", "magic/etc", "cwd", "/workspace/a", "../", "a/b/../../..", "/proc/self/root"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := agent.Rel(p)
		if err != nil {
			return
		}
		if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("Rel(%q) = %q lies outside", p, rel)
		}
		fd, err := openIn(rootFD, rel, unix.O_PATH, 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			t.Fatal(err)
		}
		if target != realRoot && !strings.HasPrefix(target, realRoot+"/") {
			t.Fatalf("%q opened %q, outside %q", p, target, realRoot)
		}
	})
}
