package readonly

import (
	"strings"
	"testing"

	"sbx.dev/sbx/hooks/internal/shelltest"
	"sbx.dev/sbx/hooks/shell"
)

func TestCheckReadOnlyAllows(t *testing.T) {
	for _, cmd := range shelltest.ReadOnlyAllowed {
		if err := CheckBash(cmd); err != nil {
			t.Errorf("denied %q: %v", cmd, err)
		}
	}
}

func TestCheckReadOnlyDenies(t *testing.T) {
	for _, cmd := range shelltest.ReadOnlyDenied {
		if err := CheckBash(cmd); err == nil {
			t.Errorf("allowed %q", cmd)
		} else if strings.ContainsRune(err.Error(), '\n') && !strings.Contains(cmd, "\n") {
			t.Errorf("%q: reason spans lines: %v", cmd, err)
		}
	}
}

func TestCheckReadOnlyLimits(t *testing.T) {
	if err := CheckBash("ls " + strings.Repeat("a", shell.MaxCommand)); err == nil {
		t.Error("allowed a command longer than the limit")
	}
}

// TestSedScriptParser pins the sed script walker on its own: every script
// here is one GNU sed accepts.
func TestSedScriptParser(t *testing.T) {
	for _, tc := range []struct {
		script string
		ok     bool
	}{
		{`p`, true},
		{`1,10p`, true},
		{`/a/,/b/d`, true},
		{`\,x,p`, true},
		{`0~3p`, true},
		{`$!N;P;D`, true},
		{`s/a/b/gI`, true},
		{`s/[[:space:]]*$//`, true},
		{`s/[]/]/x/`, true},
		{`a\
text w out`, true},
		{`a text; w out`, true},
		{`r file`, true},
		{`:loop;n;b loop`, true},
		{`s/a/b/w out`, false},
		{`s/a/b/;w out`, false},
		{`s/[/]/b/w out`, false},
		{`s/a/b/3e`, false},
		{`:x;e`, false},
		{`1!W out`, false},
		{`/x/{w out
}`, false},
		{`s/a/b`, false},
		{`k`, false},
	} {
		err := checkSedScript(tc.script)
		if (err == nil) != tc.ok {
			t.Errorf("checkSedScript(%q) = %v, want ok=%v", tc.script, err, tc.ok)
		}
	}
}

func BenchmarkCheckReadOnly(b *testing.B) {
	cmd := `git log --oneline -n 20 | grep -v fixup && sed -n '1,20p' main.go; find . -name '*.go' | wc -l`
	for b.Loop() {
		if err := CheckBash(cmd); err != nil {
			b.Fatal(err)
		}
	}
}
