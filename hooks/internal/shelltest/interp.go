package shelltest

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// RunUnderInterp runs a parsed command in mvdan.cc/sh's interpreter
// without running any program or writing any file: call sees every simple
// command with its arguments as expanded at run time, open every file the
// shell opens (redirections). Both oracles judge through them. With
// realReads, files opened for reading are read for real (a while-read
// loop then sees the hostile names).
func RunUnderInterp(t testing.TB, dir, cmd string, file *syntax.File, env []string, realReads bool,
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
