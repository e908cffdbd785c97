package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"sbx.dev/sbx/internal/pgtest"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGatewaysMigrateTogether: gateways starting at once on an empty
// database each see the full schema, applied once.
func TestGatewaysMigrateTogether(t *testing.T) {
	dsn := pgtest.FreshDB(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	stores := make([]*Store, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(context.Background(), dsn)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("gateway %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n, max int
	if err := stores[0].pool.QueryRow(context.Background(), "SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir("../migrations/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if n != len(files) || max != store.SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows up to %d, want %d up to %d", n, max, len(files), store.SchemaVersion())
	}
	// A database from a newer sbx is refused.
	if _, err := stores[0].pool.Exec(context.Background(), "INSERT INTO schema_migrations VALUES (999, '0999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(context.Background(), dsn); err == nil || !strings.Contains(err.Error(), "newer than this sbx") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("open of a newer schema: %v", err)
	}
}

// TestLeaseOnce: a timer firing on every gateway acts once.
func TestLeaseOnce(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.FreshDB(t)
	gws := []*Store{open(t, dsn), open(t, dsn), open(t, dsn)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []int
	for i, s := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.TryLease(ctx, "box/fix/max-duration", fmt.Sprint("gw", i), time.Minute)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("lease taken by %v, want exactly one gateway", winners)
	}
	w := winners[0]
	holder := fmt.Sprint("gw", w)
	if ok, err := gws[w].TryLease(ctx, "box/fix/max-duration", holder, time.Minute); !ok || err != nil {
		t.Fatalf("holder renews: %v %v", ok, err)
	}
	other := fmt.Sprint("gw", (w+1)%3)
	if ok, _ := gws[0].TryLease(ctx, "box/fix/max-duration", other, time.Minute); ok {
		t.Fatal("another gateway took an unexpired lease")
	}
	// An expired lease (its holder died) is taken over.
	if ok, err := gws[w].TryLease(ctx, "short", holder, 50*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _ := gws[0].TryLease(ctx, "short", other, time.Minute); ok {
		t.Fatal("took a live lease")
	}
	time.Sleep(100 * time.Millisecond)
	if ok, err := gws[0].TryLease(ctx, "short", other, time.Minute); !ok || err != nil {
		t.Fatalf("expired lease not taken over: %v %v", ok, err)
	}
	if err := gws[0].ReleaseLease(ctx, "short", holder); err != nil { // not the holder: no-op
		t.Fatal(err)
	}
	if ok, _ := gws[w].TryLease(ctx, "short", holder, time.Minute); ok {
		t.Fatal("release by a non-holder freed the lease")
	}
	if err := gws[0].ReleaseLease(ctx, "short", other); err != nil {
		t.Fatal(err)
	}
	if ok, _ := gws[w].TryLease(ctx, "short", holder, time.Minute); !ok {
		t.Fatal("released lease not free")
	}
	if _, err := gws[0].TryLease(ctx, "", "x", time.Minute); err == nil {
		t.Fatal("empty lease name accepted")
	}
}

// TestLeasePurge: leases long expired (one per timer firing) are deleted
// by a later TryLease; live and recently expired ones stay.
func TestLeasePurge(t *testing.T) {
	ctx := context.Background()
	s := open(t, pgtest.FreshDB(t))
	if _, err := s.pool.Exec(ctx, `INSERT INTO sbx_leases (name, holder, expires) VALUES
		('box/a/idle-sleep/1', 'gw', clock_timestamp() - interval '2 hours'),
		('box/a/idle-sleep/2', 'gw', clock_timestamp() - interval '10 minutes'),
		('box/a/follow', 'gw', clock_timestamp() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TryLease(ctx, "box/b/sleep-ttl/3", "gw", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	rows, err := s.pool.Query(ctx, "SELECT name FROM sbx_leases ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "box/a/follow box/a/idle-sleep/2 box/b/sleep-ttl/3"; strings.Join(names, " ") != want {
		t.Fatalf("leases %v, want %s", names, want)
	}
}

// TestNotifyReachesOtherGateway: an event published through one gateway
// reaches a client listening through another, in order; odd channel names
// are quoted, not executed.
func TestNotifyReachesOtherGateway(t *testing.T) {
	dsn := pgtest.FreshDB(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ch = `box-events"; DROP TABLE users; --`
	got, err := b.Listen(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := a.Notify(ctx, ch, fmt.Sprint("event ", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		select {
		case p := <-got:
			if p != fmt.Sprint("event ", i) {
				t.Fatalf("payload %d: %q", i, p)
			}
		case <-ctx.Done():
			t.Fatalf("only %d of 50 notifications arrived", i)
		}
	}
	if _, err := a.GetUser(ctx, "nobody"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("users table after the odd channel name: %v", err)
	}
	if err := a.Notify(ctx, ch, strings.Repeat("x", MaxPayload+1)); err == nil {
		t.Fatal("oversized payload accepted")
	}
	// The listener ends with its context and gives its connection back.
	lctx, lcancel := context.WithCancel(ctx)
	l2, err := b.Listen(lctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	lcancel()
	select {
	case _, ok := <-l2:
		if ok {
			t.Fatal("payload on a cancelled listener")
		}
	case <-ctx.Done():
		t.Fatal("cancelled listener's channel not closed")
	}
}

// TestListenSurvivesConnectionLoss: the listener reconnects when its
// connection is killed (a database restart or failover).
func TestListenSurvivesConnectionLoss(t *testing.T) {
	dsn := pgtest.FreshDB(t)
	a, b := open(t, dsn), open(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := b.Listen(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	// Kill every backend listening on the channel, from the other gateway.
	var killed int
	if err := a.pool.QueryRow(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate listener: %d %v", killed, err)
	}
	for {
		if err := a.Notify(ctx, "events", "after"); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if p != "after" {
				t.Fatalf("payload %q", p)
			}
			return
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no notification after the listener's connection was killed")
		}
	}
}
