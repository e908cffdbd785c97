package charset

import (
	"regexp"
	"testing"
)

// Is agrees with the anchored regexp it replaces, on every input.
func FuzzIsMatchesRegexp(f *testing.F) {
	re := regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	first, rest := New("a-z"), New("a-z0-9_-")
	for _, s := range []string{"", "a", "ab-c_9", "9a", "A", "a b", "é", "abcdefghijklmnopqrstuvwxyzabcdefg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Is(s, 1, 32, first, rest), re.MatchString(s); got != want {
			t.Errorf("%q: Is %v, regexp %v", s, got, want)
		}
	})
}

func TestNew(t *testing.T) {
	s := New("A-Za-z0-9._-")
	for _, c := range []byte("azAZ09._-") {
		if !s[c] {
			t.Errorf("%q not in set", c)
		}
	}
	for _, c := range []byte(" /:@\x00\xff") {
		if s[c] {
			t.Errorf("%q in set", c)
		}
	}
}
