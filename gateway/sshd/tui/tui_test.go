package tui

import (
	"testing"

	"github.com/charmbracelet/colorprofile"
)

// TestColorProfile: TERM and NO_COLOR from the SSH session choose the
// colours; NO_COLOR takes any non-empty value (no-color.org), an empty one
// is unset, and TERM absent, empty or dumb is plain text.
func TestColorProfile(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want colorprofile.Profile
	}{
		{[]string{"TERM=xterm-256color"}, colorprofile.ANSI256},
		{[]string{"TERM=xterm"}, colorprofile.ANSI},
		{[]string{"TERM=xterm-256color", "NO_COLOR=1"}, colorprofile.ASCII},
		{[]string{"TERM=xterm-256color", "NO_COLOR=yes"}, colorprofile.ASCII},
		{[]string{"NO_COLOR=0", "TERM=xterm"}, colorprofile.ASCII},
		{[]string{"TERM=xterm", "NO_COLOR="}, colorprofile.ANSI},
		{[]string{"NO_COLOR=1", "TERM=xterm", "NO_COLOR="}, colorprofile.ANSI},
		{[]string{"TERM=dumb"}, colorprofile.NoTTY},
		{[]string{"TERM=dumb", "NO_COLOR=1"}, colorprofile.NoTTY},
		{[]string{"TERM="}, colorprofile.NoTTY},
		{nil, colorprofile.NoTTY},
		{[]string{"TERM=dumb", "TERM=xterm-256color"}, colorprofile.ANSI256}, // the PTY's TERM goes last
	} {
		if got := colorProfile(c.env); got != c.want {
			t.Errorf("colorProfile(%q) = %v, want %v", c.env, got, c.want)
		}
	}
}

// TestTyped: typed or pasted text keeps what draws as itself and drops
// what the terminal sanitizer would escape.
func TestTyped(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":              "plain text",
		"héllo wörld ✓":           "héllo wörld ✓",
		"a\x1b[31mb":              "a[31mb",
		"evil\u202ecod.exe":       "evilcod.exe",
		"\u0085next\u009b2J":      "next2J",
		"bell\a and del\x7f gone": "bell and del gone",
	} {
		if got := typed(in); got != want {
			t.Errorf("typed(%q) = %q, want %q", in, got, want)
		}
	}
}
