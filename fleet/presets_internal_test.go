package fleet

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCleanAllowPresets: a preset reference is kept as the reference, in
// canonical form, once; an unknown one is ErrInvalid naming the known
// ones; a bare name is a host name, as it always was.
func TestCleanAllowPresets(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
		errHas   string
	}{
		{in: []string{"@npm"}, want: []string{"@npm"}},
		{in: []string{" @NPM", "example.com", "@npm", "@GitHub"}, want: []string{"@npm", "example.com", "@github"}},
		{in: []string{"npm"}, want: []string{"npm"}}, // a host named npm, not the preset
		{in: []string{"@nope"}, errHas: "unknown preset @nope (known: @apt, @crates, @github, @go, @maven, @npm, @pypi, @rubygems)"},
		{in: []string{"example.com", "@"}, errHas: "want a preset name"},
		{in: []string{"@npm:443"}, errHas: "unknown preset"},
		{in: []string{"@*.npm"}, errHas: "unknown preset"},
	} {
		got, err := cleanAllow(tc.in)
		if tc.errHas == "" {
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("cleanAllow(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("cleanAllow(%q) = %q, %v; want invalid with %q", tc.in, got, err, tc.errHas)
		}
	}
}
