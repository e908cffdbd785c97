package sshd

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/vm/agent"
)

func TestSplitBoxPath(t *testing.T) {
	cases := []struct {
		in, box, rel string
		bad          bool
	}{
		{"/", "", ".", false},
		{"", "", ".", false},
		{"/box", "box", ".", false},
		{"box/", "box", ".", false},
		{"/box/a/b.txt", "box", "a/b.txt", false},
		{"box//a/./b", "box", "a/b", false},
		{"/box/../../etc/passwd", "", "", true},
		{"../etc/passwd", "", "", true},
		{"box/a/..", "", "", true},
		{"box/a\x00b", "", "", true},
	}
	for _, c := range cases {
		box, rel, err := splitBoxPath(c.in)
		if c.bad {
			if !errors.Is(err, fleet.ErrInvalid) {
				t.Errorf("splitBoxPath(%q) = %q %q %v; want ErrInvalid", c.in, box, rel, err)
			}
			continue
		}
		if err != nil || box != c.box || rel != c.rel {
			t.Errorf("splitBoxPath(%q) = %q %q %v; want %q %q", c.in, box, rel, err, c.box, c.rel)
		}
	}
}

func FuzzSplitBoxPath(f *testing.F) {
	for _, s := range []string{"/", "box/a", "/box/../x", "a/./b//c", "..", "box/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		box, rel, err := splitBoxPath(p)
		if err != nil {
			return
		}
		// What reaches the core never climbs, is never absolute, and the
		// box is one path element.
		if strings.Contains(box, "/") || box == ".." || box == "." {
			t.Fatalf("%q: box %q", p, box)
		}
		if strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") || strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..") {
			t.Fatalf("%q: rel %q", p, rel)
		}
		if strings.IndexByte(box+rel, 0) >= 0 {
			t.Fatalf("%q: NUL passed", p)
		}
		if _, err := agent.Rel(rel); err != nil {
			t.Fatalf("%q: rel %q refused by the guest's own check: %v", p, rel, err)
		}
	})
}

func TestParseSCPRecord(t *testing.T) {
	good := []struct {
		line string
		mode uint32
		size int64
		name string
	}{
		{"C0644 12 a.txt", 0o644, 12, "a.txt"},
		{"D0755 0 dir", 0o755, 0, "dir"},
		{"C0600 0 name with spaces", 0o600, 0, "name with spaces"},
	}
	for _, c := range good {
		mode, size, name, err := parseSCPRecord(c.line)
		if err != nil || uint32(mode) != c.mode || size != c.size || name != c.name {
			t.Errorf("parseSCPRecord(%q) = %o %d %q %v", c.line, mode, size, name, err)
		}
	}
	for _, bad := range []string{
		"C0644 12 ../x", "C0644 12 ..", "C0644 12 .", "C0644 12 a/b", "C0644 12 /etc/passwd",
		"C0644 12 ", "C0644 -1 a", "C0999 1 a", "C0644 1", "C 1 a", "C0644 x a", "C0644 1 a\x00b", "C17777 1 a",
	} {
		if _, _, _, err := parseSCPRecord(bad); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("parseSCPRecord(%q): %v; want ErrInvalid", bad, err)
		}
	}
}

func FuzzParseSCPRecord(f *testing.F) {
	for _, s := range []string{"C0644 12 a.txt", "D0755 0 d", "C0644 1 ../x", "C0644 1 a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if line == "" {
			return
		}
		mode, size, name, err := parseSCPRecord(line)
		if err != nil {
			return
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || size < 0 || mode&^0o777 != 0 {
			t.Fatalf("%q accepted: %o %d %q", line, mode, size, name)
		}
	})
}

func TestParseSCP(t *testing.T) {
	cases := []struct {
		args []string
		want scpOpts
		bad  bool
	}{
		{[]string{"scp", "-f", "box/a"}, scpOpts{source: true, paths: []string{"box/a"}}, false},
		{[]string{"scp", "-r", "-p", "-t", "--", "box/-x"}, scpOpts{sink: true, recursive: true, times: true, paths: []string{"box/-x"}}, false},
		{[]string{"scp", "-v", "-d", "-t", "box/dir"}, scpOpts{sink: true, dirTarget: true, paths: []string{"box/dir"}}, false},
		{[]string{"scp", "-f", "box/a", "box/b*"}, scpOpts{source: true, paths: []string{"box/a", "box/b*"}}, false},
		{[]string{"scp", "-f", "-t", "x"}, scpOpts{}, true},
		{[]string{"scp", "box/a"}, scpOpts{}, true},
		{[]string{"scp", "-t", "a", "b"}, scpOpts{}, true},
		{[]string{"scp", "-f"}, scpOpts{}, true},
		{[]string{"scp", "-S", "evil", "-f", "a"}, scpOpts{}, true},
	}
	for _, c := range cases {
		got, err := parseSCP(c.args)
		if c.bad {
			if err == nil {
				t.Errorf("parseSCP(%q) accepted: %+v", c.args, got)
			}
			continue
		}
		if err != nil || got.source != c.want.source || got.sink != c.want.sink || got.recursive != c.want.recursive ||
			got.times != c.want.times || got.dirTarget != c.want.dirTarget || strings.Join(got.paths, "|") != strings.Join(c.want.paths, "|") {
			t.Errorf("parseSCP(%q) = %+v %v; want %+v", c.args, got, err, c.want)
		}
	}
}

// TestSpool: reads arriving out of order and ahead of the stream, as an
// SFTP client's parallel requests do, get the stream's bytes, far behind
// the newest read too; the size is the stream's length; a cap stops it.
func TestSpool(t *testing.T) {
	data := make([]byte, 13<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	pr, pw := io.Pipe()
	go func() {
		// Trickle the stream in so that reads wait for their bytes.
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := pw.Write(data[off:min(off+1<<20, len(data))]); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		pw.Close()
	}()
	sp, err := newSpool(pr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	const chunk = 32 << 10
	offs := make([]int64, 0, len(data)/chunk+1)
	for off := int64(0); off < int64(len(data)); off += chunk {
		offs = append(offs, off)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(offs), func(a, b int) { offs[a], offs[b] = offs[b], offs[a] })
	got := make([]byte, len(data))
	var wg sync.WaitGroup
	for _, off := range offs {
		wg.Go(func() {
			n, err := sp.ReadAt(got[off:min(off+chunk, int64(len(got)))], off)
			if err != nil && !(errors.Is(err, io.EOF) && off+int64(n) == int64(len(data))) {
				t.Errorf("ReadAt %d: %d %v", off, n, err)
			}
		})
	}
	wg.Wait()
	if !bytes.Equal(got, data) {
		t.Fatal("out-of-order reads did not reassemble the stream")
	}
	if n, err := sp.ReadAt(make([]byte, 10), int64(len(data))); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read at the end: %d %v", n, err)
	}
	if n, err := sp.Size(); n != int64(len(data)) || err != nil {
		t.Fatalf("Size = %d %v, want %d", n, err, len(data))
	}

	capped, err := newSpool(io.NopCloser(bytes.NewReader(data)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	if _, err := capped.Size(); !errors.Is(err, fleet.ErrLimit) {
		t.Fatalf("a spool past its cap: %v, want ErrLimit", err)
	}
	// Closing mid-stream ends the copy and the reads waiting on it.
	pr2, _ := io.Pipe()
	open, err := newSpool(pr2, 0)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := open.ReadAt(make([]byte, 1), 0); waiting <- err }()
	time.Sleep(10 * time.Millisecond)
	open.Close()
	select {
	case err := <-waiting:
		if err == nil {
			t.Fatal("a read of a closed spool got bytes")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read still waits after Close")
	}
}

// TestStreamWriterAt: out-of-order writes reach the consumer in order; a
// gap at Close is an error, not a silently short file.
func TestStreamWriterAt(t *testing.T) {
	var got bytes.Buffer
	w := newStreamWriterAt(func(r io.Reader) error { _, err := io.Copy(&got, r); return err })
	for _, c := range []struct {
		off int64
		s   string
	}{{6, "world"}, {0, "hello "}, {11, "!"}} {
		if _, err := w.WriteAt([]byte(c.s), c.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil || got.String() != "hello world!" {
		t.Fatalf("got %q %v", got.String(), err)
	}

	w = newStreamWriterAt(func(r io.Reader) error { _, err := io.Copy(io.Discard, r); return err })
	if _, err := w.WriteAt([]byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("an upload with a gap closed cleanly")
	}
	// The consumer's error (the core refusing the path) is the upload's.
	refused := errors.New("refused")
	w = newStreamWriterAt(func(r io.Reader) error { return refused })
	_, _ = w.WriteAt([]byte("x"), 0)
	if err := w.Close(); !errors.Is(err, refused) {
		t.Fatalf("Close: %v, want the core's error", err)
	}
}

func TestSFTPErr(t *testing.T) {
	for _, c := range []struct {
		err  error
		code error
	}{
		{fleet.ErrNotFound, sftp.ErrSSHFxNoSuchFile},
		{fleet.ErrInvalid, sftp.ErrSSHFxPermissionDenied},
		{fleet.ErrForbidden, sftp.ErrSSHFxPermissionDenied},
		{fleet.ErrConflict, sftp.ErrSSHFxFailure},
	} {
		if got := sftpErr(c.err); !errors.Is(got, c.code) || !strings.Contains(got.Error(), c.err.Error()) {
			t.Errorf("sftpErr(%v) = %v", c.err, got)
		}
	}
}

func TestExitCode(t *testing.T) {
	for _, c := range []struct {
		st   fleet.ExitStatus
		want int
	}{
		{fleet.ExitStatus{Code: 0}, 0},
		{fleet.ExitStatus{Code: 3}, 3},
		{fleet.ExitStatus{Code: -1, Signal: "SIGINT"}, 130},
		{fleet.ExitStatus{Code: -1, Signal: "SIGKILL"}, 137},
		{fleet.ExitStatus{Code: -1, Signal: "terminated"}, 143},
		{fleet.ExitStatus{Code: -1, Signal: "?"}, 255},
	} {
		if got := exitCode(c.st); got != c.want {
			t.Errorf("exitCode(%+v) = %d, want %d", c.st, got, c.want)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", 3 * time.Minute: "3m", 5 * time.Hour: "5h", 72 * time.Hour: "3d", -2 * time.Minute: "in 2m",
	} {
		if got := age(now, now.Add(-d)); got != want {
			t.Errorf("age(-%v) = %q, want %q", d, got, want)
		}
	}
	if age(now, time.Time{}) != "-" {
		t.Error("zero time")
	}
}
