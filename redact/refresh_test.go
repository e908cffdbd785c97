package redact

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// fakeClock is an injectable clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// listSource is a Source whose answer the test changes.
type listSource struct {
	mu    sync.Mutex
	list  []string
	err   error
	block chan struct{} // when set, calls wait for it to close
	calls atomic.Int32
}

func (s *listSource) set(list []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list, s.err = list, err
}

func (s *listSource) load(ctx context.Context) ([]string, error) {
	s.calls.Add(1)
	s.mu.Lock()
	list, err, block := s.list, s.err, s.block
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return list, err
}

const (
	secretA = "secret-A-0123456789"
	secretB = "secret-B-0123456789"
)

func newRefreshing(t *testing.T, src *listSource) (*Redactor, *fakeClock, *testutil.SyncBuffer) {
	t.Helper()
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano())
	logs := &testutil.SyncBuffer{}
	r, err := New(context.Background(), src.load, Options{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r, clock, logs
}

// eventually polls cond: the reload runs in the background by design.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func redacts(r *Redactor, secret string) bool {
	return !strings.Contains(r.String("x "+secret+" y").String(), secret)
}

func TestRefreshLazy(t *testing.T) {
	src := &listSource{list: []string{secretA}}
	r, clock, _ := newRefreshing(t, src)
	if !redacts(r, secretA) || redacts(r, secretB) {
		t.Fatal("initial list not applied")
	}
	src.set([]string{secretB}, nil)
	clock.Advance(DefaultRefresh - time.Second)
	r.String("read")
	if n := src.calls.Load(); n != 1 {
		t.Fatalf("reloaded before the period: %d calls", n)
	}
	clock.Advance(time.Second)
	r.String("read") // triggers the reload, served with the old list
	eventually(t, "reload", func() bool { return redacts(r, secretB) })
	if redacts(r, secretA) {
		t.Fatal("removed secret still matched")
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d source calls, want 2", n)
	}
}

func TestRefreshFailureKeepsList(t *testing.T) {
	src := &listSource{list: []string{secretA}}
	r, clock, logs := newRefreshing(t, src)
	src.set(nil, errors.New("store is locked"))
	clock.Advance(DefaultRefresh)
	r.String("read")
	eventually(t, "failed reload logged", func() bool { return strings.Contains(logs.String(), "store is locked") })
	eventually(t, "reload finished", func() bool { return !r.refreshing.Load() })
	if !redacts(r, secretA) {
		t.Fatal("a failed reload dropped the known secrets")
	}
	// Retried after the short retry delay, not hammered on every read.
	r.String("read")
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d source calls right after a failure, want 2", n)
	}
	src.set([]string{secretA, secretB}, nil)
	clock.Advance(r.retry())
	r.String("read")
	eventually(t, "retry", func() bool { return redacts(r, secretB) })
	// Refresh reports the error to a caller who asks for it.
	src.set(nil, errors.New("gone"))
	if err := r.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("Refresh error = %v", err)
	}
	if !redacts(r, secretA) || !redacts(r, secretB) {
		t.Fatal("a failed Refresh dropped the known secrets")
	}
}

func TestRefreshNeverBlocksReads(t *testing.T) {
	src := &listSource{list: []string{secretA}}
	r, clock, _ := newRefreshing(t, src)
	release := make(chan struct{})
	src.mu.Lock()
	src.block = release
	src.list = []string{secretA, secretB}
	src.mu.Unlock()
	clock.Advance(DefaultRefresh)
	// The reload hangs in the source; reads go on with the current list and
	// start no second reload.
	r.String("read")
	eventually(t, "reload started", func() bool { return src.calls.Load() == 2 })
	for range 100 {
		if !redacts(r, secretA) {
			t.Fatal("read during a reload missed a known secret")
		}
	}
	if n := src.calls.Load(); n != 2 {
		t.Fatalf("%d source calls while one reload hangs, want 2", n)
	}
	// An explicit Refresh waits for the hung reload only as long as its ctx.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := r.Refresh(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Refresh behind a hung reload = %v, want its deadline", err)
	}
	close(release)
	eventually(t, "reload", func() bool { return redacts(r, secretB) })
}

func TestRefreshConcurrentReads(t *testing.T) {
	src := &listSource{list: []string{secretA}}
	r, clock, _ := newRefreshing(t, src)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Reloads flip the list while readers stream; secretA is in every list.
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				src.set([]string{secretA, secretB}, nil)
			} else {
				src.set([]string{secretA}, nil)
			}
			clock.Advance(DefaultRefresh)
			if err := r.Refresh(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var leaks atomic.Int32
	for range 4 {
		wg.Go(func() {
			for range 200 {
				var out bytes.Buffer
				w := r.NewWriter(&out)
				for _, part := range []string{"log ", secretA[:7], secretA[7:], "\n"} {
					io.WriteString(w, part)
				}
				w.Close()
				if strings.Contains(out.String(), secretA) || !redacts(r, secretA) {
					leaks.Add(1)
				}
			}
		})
	}
	time.Sleep(10 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := leaks.Load(); n > 0 {
		t.Fatalf("%d reads leaked a secret during reloads", n)
	}
}

func TestNewFailsClosed(t *testing.T) {
	r, err := New(context.Background(), func(context.Context) ([]string, error) {
		return nil, errors.New("no store")
	}, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || r != nil || !strings.Contains(err.Error(), "no store") {
		t.Fatalf("New = %v, %v; want an error and no Redactor", r, err)
	}
}

func TestShortSecretsLogged(t *testing.T) {
	src := &listSource{list: []string{"12345", "abc", secretA, secretA, "\n" + secretB + "\r\n"}}
	r, _, logs := newRefreshing(t, src)
	if !strings.Contains(logs.String(), "count=2") {
		t.Fatalf("short secrets not reported: %q", logs.String())
	}
	if r.Known() != 2 {
		t.Fatalf("Known() = %d, want 2 (deduplicated, trimmed)", r.Known())
	}
	if !redacts(r, secretB) || redacts(r, "12345") {
		t.Fatal("wrong exact-match set")
	}
	// Reported once per change, not on every reload.
	r.Refresh(context.Background())
	if n := strings.Count(logs.String(), "too short"); n != 1 {
		t.Fatalf("short secrets reported %d times", n)
	}
}

func TestPatternsOnly(t *testing.T) {
	r, err := New(context.Background(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var zero Redactor
	for _, r := range []*Redactor{r, &zero} {
		if got := r.String("t " + ghpToken).String(); got != "t ghp_…WXYZ" {
			t.Fatalf("got %q", got)
		}
		if r.Known() != 0 {
			t.Fatalf("Known() = %d", r.Known())
		}
	}
	if err := zero.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh on the zero Redactor succeeded")
	}
}

// TestRefreshTooManySecrets: a list whose matcher would exceed maxTable is
// refused and the previous list stays.
func TestRefreshTooManySecrets(t *testing.T) {
	src := &listSource{list: []string{secretA}}
	r, _, _ := newRefreshing(t, src)
	huge := make([]string, 0, 200)
	for i := range 200 {
		huge = append(huge, strings.Repeat(string(rune('A'+i%26)), maxSecret-i)) // 200 × 16 KiB
	}
	src.set(huge, nil)
	err := r.Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "MiB") {
		t.Fatalf("Refresh = %v, want a size error", err)
	}
	if !redacts(r, secretA) || r.Known() != 1 {
		t.Fatal("previous list lost")
	}
}
