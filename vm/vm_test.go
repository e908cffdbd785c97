package vm

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"box1", true},
		{"a", true},
		{"A-Z_a.z-09", true},
		{"..a", true},
		{strings.Repeat("x", 128), true},
		{"", false},
		{".", false},
		{"..", false},
		{strings.Repeat("x", 129), false},
		{"../root", false},
		{"a/b", false},
		{"/etc", false},
		{"a b", false},
		{"a\x00b", false},
		{"é", false},
		{"a\n", false},
		{"$(id)", false},
		{"-", true},
	} {
		err := ValidName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// FuzzValidName: an accepted name is always a single, plain path element.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"box", "..", ".", "a/b", "../x", strings.Repeat("a", 130)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidName(s) != nil {
			return
		}
		if s == "." || s == ".." || strings.ContainsAny(s, "/\x00\\ \n") || len(s) == 0 || len(s) > 128 {
			t.Fatalf("ValidName accepted %q", s)
		}
		for _, r := range s {
			if r > 127 {
				t.Fatalf("ValidName accepted non-ASCII %q", s)
			}
		}
	})
}

func TestValidEgress(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/var/lib/sbx/egress/box1.sock", true},
		{"/tmp/TestX123/001/e.sock", true},
		{"/a/b+c@d:e=f_g-h.i", true},
		{"/" + strings.Repeat("x", 106), true},
		{"/" + strings.Repeat("x", 107), false},
		{"", false},
		{"relative.sock", false},
		{"/a/../b.sock", false},
		{"/a//b.sock", false},
		{"/a/b/", false},
		{"/a b.sock", false},                 // QEMU's spawn splits on spaces
		{"/a,b.sock", false},                 // a comma ends a QEMU option value
		{"/a,guestfwd=tcp:1.2.3.4:1", false}, // option injection
		{"/a'b", false},
		{"/a\"b", false},
		{"/a\\b", false},
		{"/a\nb", false},
		{"/a\x00b", false},
		{"/a$(id)", false},
		{"/é", false},
	} {
		err := ValidEgress(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("ValidEgress(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
}

// FuzzValidEgress: an accepted path is absolute, clean, short enough for a
// socket, and carries nothing QEMU's option parser or its command splitter
// treats specially.
func FuzzValidEgress(f *testing.F) {
	for _, s := range []string{"/run/e.sock", "/a,b", "/a b", "rel", "/a/../b", "/'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidEgress(s) != nil {
			return
		}
		if !strings.HasPrefix(s, "/") || len(s) > 107 || strings.ContainsAny(s, ", \t\n\x00'\"\\$`;|&<>*?") {
			t.Fatalf("ValidEgress accepted %q", s)
		}
		if strings.Contains(s, "/../") || strings.Contains(s, "//") || strings.HasSuffix(s, "/..") {
			t.Fatalf("ValidEgress accepted unclean %q", s)
		}
	})
}
