package runlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangBound is how long a reader may take to notice a close or cancel before
// the test calls it a hang. It is a deadlock detector, not a speed claim.
const hangBound = 5 * time.Second

func openLog(t *testing.T, dir, id string) *Log {
	t.Helper()
	l, err := Open(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// readAll reads r to EOF in a goroutine and fails the test if that takes
// longer than hangBound after done is closed.
func readAllAsync(r io.Reader) <-chan result {
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- result{b, err}
	}()
	return ch
}

type result struct {
	data []byte
	err  error
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hangBound):
		t.Fatalf("reader still blocked %v after the log was closed", hangBound)
		return result{}
	}
}

func TestSubscribersFromManyOffsetsSeeExactBytes(t *testing.T) {
	l := openLog(t, t.TempDir(), "run-1")
	var want bytes.Buffer
	write := func(s string) {
		if _, err := l.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		want.WriteString(s)
	}
	write("first line\nsecond ")

	// Subscribers at the start, mid-record, at the current end.
	offsets := []int64{0, 1, 6, 11, l.Size()}
	var chans []<-chan result
	for _, off := range offsets {
		r, err := l.Subscribe(context.Background(), off)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		chans = append(chans, readAllAsync(r))
	}
	for i := range 200 {
		write(fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i)))
	}
	// One more subscriber attached mid-stream from 0 gets everything too.
	late, err := l.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	offsets = append(offsets, 0)
	chans = append(chans, readAllAsync(late))
	write("last\n")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		got := wait(t, ch)
		if got.err != nil {
			t.Fatalf("subscriber %d from %d: %v", i, offsets[i], got.err)
		}
		if w := want.Bytes()[offsets[i]:]; !bytes.Equal(got.data, w) {
			t.Fatalf("subscriber %d from %d: got %d bytes, want %d", i, offsets[i], len(got.data), len(w))
		}
	}
}

func TestCloseUnblocksWaitingSubscriber(t *testing.T) {
	l := openLog(t, t.TempDir(), "run-close")
	l.Write([]byte("hello"))
	r, err := l.Subscribe(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ch := readAllAsync(r)
	time.Sleep(20 * time.Millisecond) // let it block on the empty tail
	l.Close()
	got := wait(t, ch)
	if got.err != nil || len(got.data) != 0 {
		t.Fatalf("got %q, %v; want clean EOF with no data", got.data, got.err)
	}
}

func TestCancelAndReaderCloseUnblock(t *testing.T) {
	l := openLog(t, t.TempDir(), "run-cancel")
	ctx, cancel := context.WithCancel(context.Background())
	r1, _ := l.Subscribe(ctx, 0)
	defer r1.Close()
	r2, _ := l.Subscribe(context.Background(), 0)
	ch1, ch2 := readAllAsync(r1), readAllAsync(r2)
	time.Sleep(20 * time.Millisecond)
	cancel()
	if got := wait(t, ch1); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled subscriber: %v, want context.Canceled", got.err)
	}
	r2.Close()
	if got := wait(t, ch2); !errors.Is(got.err, os.ErrClosed) {
		t.Fatalf("closed reader: %v, want os.ErrClosed", got.err)
	}
}

func TestReopenContinuesAtEnd(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, "run-restart")
	if err != nil {
		t.Fatal(err)
	}
	l.Write([]byte("before restart\n"))
	// A second appender on the same file is refused while the first lives.
	if _, err := Open(dir, "run-restart"); err == nil {
		t.Fatal("second Open of an open log succeeded")
	}
	l.Close()

	l2 := openLog(t, dir, "run-restart")
	if got := l2.Size(); got != 15 {
		t.Fatalf("reopened size %d, want 15", got)
	}
	r, err := l2.Subscribe(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l2.Write([]byte("after\n"))
	l2.Close()
	select {
	case <-l2.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	got := wait(t, readAllAsync(r))
	if string(got.data) != "restart\nafter\n" || got.err != nil {
		t.Fatalf("got %q, %v", got.data, got.err)
	}
	if r.Offset() != 21 {
		t.Fatalf("offset %d, want 21", r.Offset())
	}
	b, _ := os.ReadFile(filepath.Join(dir, "run-restart.log"))
	if string(b) != "before restart\nafter\n" {
		t.Fatalf("file holds %q", b)
	}
}

func TestConcurrentWritersSerialised(t *testing.T) {
	l := openLog(t, t.TempDir(), "run-writers")
	const writers, records = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range records {
				// Each record is one Write; it must land in one piece.
				rec := fmt.Sprintf("<%d:%d:%s>\n", w, i, strings.Repeat(string(rune('a'+w)), 100+i))
				if _, err := l.Write([]byte(rec)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	l.Close()
	b, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != writers*records {
		t.Fatalf("%d records, want %d", len(lines), writers*records)
	}
	next := make([]int, writers)
	for _, line := range lines {
		var w, i int
		var body string
		if _, err := fmt.Sscanf(line, "<%d:%d:%s", &w, &i, &body); err != nil {
			t.Fatalf("torn record %q: %v", line, err)
		}
		if want := strings.Repeat(string(rune('a'+w)), 100+i) + ">"; body != want || i != next[w] {
			t.Fatalf("torn or reordered record %q", line)
		}
		next[w]++
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"", ".", "..", "../x", "a/b", "a\x00b", strings.Repeat("a", 129), "run 1"} {
		if _, err := Open(dir, id); err == nil {
			t.Errorf("Open(%q) succeeded", id)
		}
	}
	l := openLog(t, dir, "run-bad")
	l.Write([]byte("abc"))
	for _, off := range []int64{-1, 4} {
		if _, err := l.Subscribe(context.Background(), off); err == nil {
			t.Errorf("Subscribe(%d) on a 3-byte log succeeded", off)
		}
	}
	l.Close()
	if _, err := l.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	// A finished run's log is still readable to the end.
	r, err := l.Subscribe(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := wait(t, readAllAsync(r)); string(got.data) != "bc" || got.err != nil {
		t.Fatalf("closed log read %q, %v", got.data, got.err)
	}
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"run-1", "..", "../../etc/passwd", "a/b", "ok.id_2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidID(id) != nil {
			return
		}
		// An accepted id must name a file directly inside dir.
		p := filepath.Join("/d", id+".log")
		if filepath.Dir(p) != "/d" || filepath.Base(p) != id+".log" {
			t.Fatalf("id %q escapes the log dir: %s", id, p)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	line := []byte(strings.Repeat("x", 127) + "\n")
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := l.Write(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanout50 measures writing while 50 subscribers follow the log;
// bytes/s counts what the writer appends (each subscriber reads it all).
func BenchmarkFanout50(b *testing.B) {
	l, err := Open(b.TempDir(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 127) + "\n")
	var wg sync.WaitGroup
	counts := make([]int64, 50)
	for i := range counts {
		r, err := l.Subscribe(context.Background(), 0)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			counts[i], _ = io.Copy(io.Discard, r)
		}()
	}
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := l.Write(line); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	wg.Wait()
	for i, n := range counts {
		if n != l.Size() {
			b.Fatalf("subscriber %d read %d of %d bytes", i, n, l.Size())
		}
	}
}

// TestSlowSubscriberNeverBlocksWriter: a subscriber that reads nothing while
// 8 MiB are written costs the writer nothing, and later reads it all.
func TestSlowSubscriberNeverBlocksWriter(t *testing.T) {
	l := openLog(t, t.TempDir(), "run-slow")
	slow, err := l.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	done := make(chan error, 1)
	go func() {
		for range 128 {
			if _, err := l.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- l.Close()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangBound):
		t.Fatal("writer blocked behind a subscriber that does not read")
	}
	got := wait(t, readAllAsync(slow))
	if got.err != nil || len(got.data) != 128*len(chunk) {
		t.Fatalf("slow subscriber read %d bytes, %v", len(got.data), got.err)
	}
}
