package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mkfs makes a real (small) ext4 image at <data>/images/<name>.ext4.
func mkfs(t *testing.T, data, name string) string {
	t.Helper()
	dir := filepath.Join(data, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".ext4")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", path, "4M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 (e2fsprogs): %v\n%s", err, out)
	}
	return path
}

func TestResolve(t *testing.T) {
	data := t.TempDir()
	path := mkfs(t, data, Agent)
	img, err := Resolve(data, Agent)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != Agent || img.Path != path || img.Size != 4<<20 {
		t.Fatalf("Resolve = %+v, want agent at %s with 4 MiB", img, path)
	}
}

func TestResolveErrors(t *testing.T) {
	data := t.TempDir()
	os.MkdirAll(filepath.Join(data, "images"), 0o755)
	os.WriteFile(filepath.Join(data, "images", "junk.ext4"), make([]byte, 4096), 0o644)
	os.WriteFile(filepath.Join(data, "images", "short.ext4"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(data, "secret.ext4"), make([]byte, 4096), 0o644)
	for _, tc := range []struct{ name, want string }{
		{Agent, "run `go tool -modfile=tools/go.mod task image`"},
		{"tiny", `image "tiny" not found`},
		{"junk", "no ext4 superblock"},
		{"short", "read ext4 superblock"},
		{"", "want [a-z0-9]"},
		{"../secret", "want [a-z0-9]"},
		{"a/b", "want [a-z0-9]"},
		{"..", "want [a-z0-9]"},
		{"Agent", "want [a-z0-9]"},
		{"agent.ext4", "want [a-z0-9]"},
		{strings.Repeat("a", 65), "want [a-z0-9]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve(data, tc.name)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resolve(%q) error = %v, want %q", tc.name, err, tc.want)
			}
		})
	}
}

// FuzzResolve: whatever the name, a resolved image lies directly in
// <data>/images and an error never panics.
func FuzzResolve(f *testing.F) {
	data := f.TempDir()
	dir := filepath.Join(data, "images")
	os.MkdirAll(dir, 0o755)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", filepath.Join(dir, "agent.ext4"), "1M").CombinedOutput(); err != nil {
		f.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	for _, s := range []string{"agent", "../agent", "images/../agent", "agent\x00", "/etc/passwd", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		img, err := Resolve(data, name)
		if err != nil {
			return
		}
		if filepath.Dir(img.Path) != dir || img.Name != name {
			t.Fatalf("Resolve(%q) = %s, outside %s", name, img.Path, dir)
		}
	})
}

// validName matches the regexp it replaced, [a-z0-9][a-z0-9_-]{0,63}.
func TestValidNameMatchesRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	for _, s := range []string{"agent", "a", "0", "a-b_c", "-a", "_a", "A", "a.b", "a/b", "..", "", "a b",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "é", "a\n", "agent\x00"} {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, regexp %v", s, got, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	f.Add("agent")
	f.Add("-x")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, regexp %v", s, got, want)
		}
	})
}
