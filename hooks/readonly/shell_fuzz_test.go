package readonly

import (
	"os"
	"path/filepath"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"sbx.dev/sbx/hooks/internal/shelltest"
	"sbx.dev/sbx/hooks/shell"
)

// evilNames are files a hostile repository could hold so that a glob
// expands into an option.
var evilNames = []string{"-delete", "-i", "--in-place", "-o", "--output=x", "--pre=sh", "-exec", "-v", "a b", "-fprint"}

// FuzzCheckReadOnly checks the checker against a second opinion: every
// command it allows is run by mvdan.cc/sh's own interpreter (nothing is
// executed for real) in a directory full of hostile file names, and at run
// time, after every expansion, each simple command must still be an
// allow-listed program whose checker accepts the expanded arguments, and no
// file may be opened for writing.
func FuzzCheckReadOnly(f *testing.F) {
	for _, c := range shelltest.ReadOnlyAllowed {
		f.Add(c)
	}
	for _, c := range shelltest.ReadOnlyDenied {
		f.Add(c)
	}
	// Expansions next to option values and operands.
	for _, c := range []string{`sed -l 1{,x} p f`, `awk -F x{,y} '{print}' f`, `uniq a{,b}`, `git -C a{,b} log`,
		`sed -n p ./*`, `find ./* -name x`, `awk ~- f`, `sort -k 1 ./*`} {
		f.Add(c)
	}
	dir := f.TempDir()
	for _, n := range evilNames {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x\n"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		if CheckBash(cmd) != nil {
			return
		}
		file, err := shell.Parse(cmd)
		if err != nil {
			t.Fatalf("allowed %q that does not parse: %v", cmd, err)
		}
		runAllowed(t, dir, cmd, file)
	})
}

// TestAllowedUnderInterpreter runs the allow table under the same oracle.
func TestAllowedUnderInterpreter(t *testing.T) {
	dir := t.TempDir()
	for _, n := range evilNames {
		os.WriteFile(filepath.Join(dir, n), []byte("x\n"), 0o644)
	}
	for _, cmd := range shelltest.ReadOnlyAllowed {
		file, err := shell.Parse(cmd)
		if err != nil {
			t.Fatal(err)
		}
		runAllowed(t, dir, cmd, file)
	}
}

func runAllowed(t *testing.T, dir, cmd string, file *syntax.File) {
	t.Helper()
	shelltest.RunUnderInterp(t, dir, cmd, file,
		[]string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "x=-delete", "S=w out", `OLDPWD=/w/{system("x")}`}, true,
		func(args []string) {
			p, ok := programs[args[0]]
			if !ok {
				t.Errorf("allowed %q, which runs %q at run time", cmd, args)
				return
			}
			if p.Check != nil {
				expanded := make([]shell.Arg, len(args)-1)
				for i, a := range args[1:] {
					expanded[i] = shell.Arg{Text: a, Static: true}
				}
				if err := p.Check(expanded); err != nil {
					t.Errorf("allowed %q, whose run-time arguments %q fail the checker: %v", cmd, args, err)
				}
			}
		},
		func(path string, write bool) {
			// The interpreter expands a redirection target as
			// expand.Literal does, keeping backslashes that bash removes
			// (>/\dev/null opens /dev/null).
			if write && !shell.OutputSinks[path] && !shell.OutputSinks[shell.UnescapeUnquoted(path)] {
				t.Errorf("allowed %q, which opens %s for writing", cmd, path)
			}
		})
}
