package agent_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// TestFileErrorKinds: every error a caller can cause by naming the wrong
// path reaches the host with a kind (not "other", which the host reports as
// its own failure): a file where a directory is wanted, a directory where a
// file is, a name too long, a symlink loop, a FIFO or a socket (whose read
// must not hang waiting for a writer).
func TestFileErrorKinds(t *testing.T) {
	c, root := newClient(t)
	ctx := ctxT(t)
	must(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("a"), 0o644))
	must(t, os.Mkdir(filepath.Join(root, "dir"), 0o755))
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	must(t, os.Symlink("loop2", filepath.Join(root, "loop1")))
	must(t, os.Symlink("loop1", filepath.Join(root, "loop2")))
	ln, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	long := strings.Repeat("x", 300)

	isInvalid := func(err error) bool { return errors.Is(err, fs.ErrInvalid) || errors.Is(err, agent.ErrEscape) }
	cases := []struct {
		name string
		call func() error
		want func(error) bool
	}{
		{"readdir of a file", func() error { _, err := c.ReadDir(ctx, "a.txt"); return err }, isInvalid},
		{"stat below a file", func() error { _, err := c.Stat(ctx, "a.txt/x"); return err }, isInvalid},
		{"read below a file", func() error { _, err := c.ReadFile(ctx, "a.txt/x"); return err }, isInvalid},
		{"read of a directory", func() error { _, err := c.ReadFile(ctx, "dir"); return err }, isInvalid},
		{"write over a directory", func() error { return c.WriteFile(ctx, "dir", 0, strings.NewReader("x")) }, isInvalid},
		{"write below a file", func() error { return c.WriteFile(ctx, "a.txt/x", 0, strings.NewReader("x")) }, isInvalid},
		{"mkdir below a file", func() error { return c.MkdirAll(ctx, "a.txt/d", 0) }, isInvalid},
		{"mkdir over a file", func() error { return c.MkdirAll(ctx, "a.txt", 0) }, isInvalid},
		{"stat of a name too long", func() error { _, err := c.Stat(ctx, long); return err }, isInvalid},
		{"readdir of a name too long", func() error { _, err := c.ReadDir(ctx, long); return err }, isInvalid},
		{"read of a symlink loop", func() error { _, err := c.ReadFile(ctx, "loop1"); return err }, isInvalid},
		{"read of a FIFO", func() error { _, err := c.ReadFile(ctx, "fifo"); return err }, isInvalid},
		{"read of a socket", func() error { _, err := c.ReadFile(ctx, "sock"); return err }, isInvalid},
		{"read of a missing file", func() error { _, err := c.ReadFile(ctx, "nope"); return err },
			func(err error) bool { return errors.Is(err, fs.ErrNotExist) }},
	}
	for _, tc := range cases {
		done := make(chan error, 1)
		go func() { done <- tc.call() }()
		select {
		case err := <-done:
			var ae *agent.Error
			if !tc.want(err) || !errors.As(err, &ae) || ae.Code == agent.CodeOther {
				t.Errorf("%s: %v (%#v): want a classified error", tc.name, err, ae)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer in 10 s", tc.name)
		}
	}
}
