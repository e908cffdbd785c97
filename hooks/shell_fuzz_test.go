package hooks

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
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
	for _, c := range readOnlyAllowed {
		f.Add(c)
	}
	for _, c := range readOnlyDenied {
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
		if CheckReadOnly(cmd) != nil {
			return
		}
		file, err := parseBash(cmd)
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
	for _, cmd := range readOnlyAllowed {
		file, err := parseBash(cmd)
		if err != nil {
			t.Fatal(err)
		}
		runAllowed(t, dir, cmd, file)
	}
}

func runAllowed(t *testing.T, dir, cmd string, file *syntax.File) {
	t.Helper()
	runUnderInterp(t, dir, cmd, file,
		[]string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "x=-delete", "S=w out", `OLDPWD=/w/{system("x")}`}, true,
		func(args []string) {
			p, ok := programs[args[0]]
			if !ok {
				t.Errorf("allowed %q, which runs %q at run time", cmd, args)
				return
			}
			if p.check != nil {
				expanded := make([]arg, len(args)-1)
				for i, a := range args[1:] {
					expanded[i] = arg{text: a, static: true}
				}
				if err := p.check(expanded); err != nil {
					t.Errorf("allowed %q, whose run-time arguments %q fail the checker: %v", cmd, args, err)
				}
			}
		},
		func(path string, write bool) {
			// The interpreter expands a redirection target as
			// expand.Literal does, keeping backslashes that bash removes
			// (>/\dev/null opens /dev/null).
			if write && !outputSinks[path] && !outputSinks[unescapeUnquoted(path)] {
				t.Errorf("allowed %q, which opens %s for writing", cmd, path)
			}
		})
}

// runUnderInterp runs a parsed command in mvdan.cc/sh's interpreter
// without running any program or writing any file: call sees every simple
// command with its arguments as expanded at run time, open every file the
// shell opens (redirections). Both oracles judge through them. With
// realReads, files opened for reading are read for real (a while-read
// loop then sees the hostile names).
func runUnderInterp(t testing.TB, dir, cmd string, file *syntax.File, env []string, realReads bool,
	call func(args []string), open func(path string, write bool)) {
	t.Helper()
	procSubst := false
	syntax.Walk(file, func(n syntax.Node) bool {
		_, ok := n.(*syntax.ProcSubst)
		procSubst = procSubst || ok
		return !procSubst
	})
	if procSubst && !realReads {
		// The interpreter makes a real FIFO for <(...) and waits for its
		// other end forever when the handlers below never open it.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r, err := interp.New(
		interp.Dir(dir),
		interp.Env(expand.ListEnviron(env...)),
		interp.StdIO(strings.NewReader(""), io.Discard, io.Discard),
		interp.CallHandler(func(ctx context.Context, args []string) ([]string, error) {
			if len(args) > 0 {
				call(args)
			}
			return args, nil
		}),
		// Never run a real program.
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
			return func(context.Context, []string) error { return nil }
		}),
		interp.OpenHandler(func(ctx context.Context, path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
			write := flag&(os.O_WRONLY|os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND) != 0
			open(path, write)
			if realReads && !write {
				return os.Open(path)
			}
			return nopRWC{}, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The interpreter has its own bugs (its test builtin panics on
		// "test 0 = 0 = 0"); they say nothing about the checker, and the
		// handlers have judged every call made up to that point.
		if p := recover(); p != nil {
			t.Logf("interpreter panicked on %q: %v", cmd, p)
		}
	}()
	r.Run(ctx, file) // the exit status is irrelevant; the handlers judge
}

type nopRWC struct{}

func (nopRWC) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopRWC) Write(p []byte) (int, error) { return len(p), nil }
func (nopRWC) Close() error                { return nil }
