package vm

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/errkind"
)

func TestValidCheckpointID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"cp-abcd", true},
		{"cp-ab12CD34", true},
		{"cp-" + strings.Repeat("a", 32), true},
		{"", false},
		{"cp-", false},
		{"cp-abc", false},
		{"cp-" + strings.Repeat("a", 33), false},
		{"abcdefgh", false},
		{"CP-abcdefgh", false},
		{"cp-../../x", false},
		{"cp-ab/cd", false},
		{"cp-ab.cd", false},
		{"cp-ab cd", false},
		{"cp-abcd\x00", false},
		{"..", false},
		{".cp-abcd.tmp", false},
		{"cp-abcdé", false},
	} {
		err := ValidCheckpointID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidCheckpointID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errkind.Invalid) {
			t.Errorf("ValidCheckpointID(%q): %v is not invalid", tc.id, err)
		}
	}
}

func TestValidCheckpointLabel(t *testing.T) {
	for _, tc := range []struct {
		label string
		ok    bool
	}{
		{"", true},
		{"before the refactor", true},
		{"ünïcödé ✓", true},
		{strings.Repeat("x", MaxCheckpointLabel), true},
		{strings.Repeat("x", MaxCheckpointLabel+1), false},
		{"two\nlines", false},
		{"tab\there", false},
		{"nul\x00", false},
		{"esc\x1b[31m", false},
		{"\xff\xfe", false},
	} {
		err := ValidCheckpointLabel(tc.label)
		if (err == nil) != tc.ok {
			t.Errorf("ValidCheckpointLabel(%q) = %v, want ok=%v", tc.label, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errkind.Invalid) {
			t.Errorf("ValidCheckpointLabel(%q): %v is not invalid", tc.label, err)
		}
	}
}

// FuzzValidCheckpointID: an id it accepts names one directory entry right
// under the checkpoints directory, never anything above or beside it.
func FuzzValidCheckpointID(f *testing.F) {
	for _, s := range []string{"cp-abcd1234", "cp-../x", "../cp-abcd", "cp-abcd/..", ".", "cp-\x00abcd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidCheckpointID(id) != nil {
			return
		}
		root := "/data/boxes/b/checkpoints"
		p := filepath.Join(root, id)
		if filepath.Dir(p) != root || filepath.Base(p) != id || strings.HasPrefix(id, ".") {
			t.Fatalf("accepted id %q escapes or hides: %s", id, p)
		}
	})
}
