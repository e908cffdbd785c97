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
