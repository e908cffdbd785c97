package postgres

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/keys"
)

var testRec = audit.Entry{Actor: "test", Front: "cli", Action: "test"}

// adminDSN is the throwaway PostgreSQL of `go tool task cluster-up`
// (SBX_POSTGRES_DSN overrides); "" when there is none.
func adminDSN() (string, string) {
	if d := os.Getenv("SBX_POSTGRES_DSN"); d != "" {
		return d, "SBX_POSTGRES_DSN"
	}
	dir := os.Getenv("SBX_CLUSTER_DIR")
	if dir == "" {
		dir = "/tmp/sbx-cluster"
	}
	f := filepath.Join(dir, "postgres.dsn")
	b, err := os.ReadFile(f)
	if err != nil {
		return "", f
	}
	return strings.TrimSpace(string(b)), f
}

// freshDB creates an empty database for one test and returns its DSN; it
// is dropped when the test ends. Skips (saying why) with no PostgreSQL.
func freshDB(t testing.TB) string {
	t.Helper()
	dsn, from := adminDSN()
	if dsn == "" {
		t.Skipf("no test PostgreSQL: %s missing (run `go tool task cluster-up`)", from)
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Skipf("no test PostgreSQL at %s (from %s): %v", dsn, from, err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "sbx_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
		admin.Close(ctx)
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newKey(t testing.TB, user string) keys.Key {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return keys.Key{User: user, Fingerprint: ssh.FingerprintSHA256(pk), Type: pk.Type(), PublicKey: pk, Created: time.Now()}
}

// TestMigrationSetsMatch keeps the two dialects' migrations the same set:
// same numbers, same file names.
func TestMigrationSetsMatch(t *testing.T) {
	list := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			if strings.HasSuffix(e.Name(), ".sql") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	sqlite, pg := list("../migrations"), list("migrations")
	if !slices.Equal(sqlite, pg) {
		t.Fatalf("migrations differ:\n  sqlite (store/migrations):            %v\n  postgres (store/postgres/migrations): %v", sqlite, pg)
	}
	if len(pg) != SchemaVersion() {
		t.Fatalf("SchemaVersion %d with %d files", SchemaVersion(), len(pg))
	}
}

// TestGatewaysMigrateTogether: gateways starting at once on an empty
// database each see the full schema, applied once.
func TestGatewaysMigrateTogether(t *testing.T) {
	dsn := freshDB(t)
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
	if n != SchemaVersion() || max != SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows up to %d, want %d", n, max, SchemaVersion())
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

func TestUsersKeysAndLastAdmin(t *testing.T) {
	ctx := context.Background()
	s := open(t, freshDB(t))
	alice, err := s.CreateUser(ctx, keys.User{Name: "alice", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "alice")}, testRec)
	if err != nil || alice.ID == 0 {
		t.Fatalf("create alice: %+v %v", alice, err)
	}
	if _, err := s.CreateUser(ctx, keys.User{Name: "alice", Role: keys.RoleOperator, Created: time.Now()}, nil, testRec); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("duplicate user: %v", err)
	}
	k := newKey(t, "bob")
	if _, err := s.CreateUser(ctx, keys.User{Name: "bob", Role: keys.RoleOperator, Created: time.Now()}, []keys.Key{k, k}, testRec); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("same key twice: %v", err)
	}
	if _, err := s.GetUser(ctx, "bob"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("a failed create left bob: %v", err)
	}
	if err := s.DeleteUser(ctx, "alice", testRec); !errors.Is(err, keys.ErrLastAdmin) {
		t.Fatalf("delete the last admin: %v", err)
	}
	if err := s.SetUserDisabled(ctx, "alice", true, testRec); !errors.Is(err, keys.ErrLastAdmin) {
		t.Fatalf("disable the last admin: %v", err)
	}
	ks, err := s.ListKeys(ctx, "alice")
	if err != nil || len(ks) != 1 {
		t.Fatalf("keys of alice: %v %v", ks, err)
	}
	if err := s.DeleteKey(ctx, "alice", ks[0].Fingerprint, testRec); !errors.Is(err, keys.ErrLastAdmin) {
		t.Fatalf("delete the last admin's last key: %v", err)
	}
	k2 := newKey(t, "alice")
	if err := s.AddKeys(ctx, "alice", []keys.Key{k2}, testRec); err != nil {
		t.Fatal(err)
	}
	got, u, err := s.KeyByFingerprint(ctx, k2.Fingerprint)
	if err != nil || u.Name != "alice" || u.Role != keys.RoleAdmin || !bytesEq(got.PublicKey.Marshal(), k2.PublicKey.Marshal()) {
		t.Fatalf("key by fingerprint: %+v %+v %v", got, u, err)
	}
	if err := s.DeleteKey(ctx, "alice", ks[0].Fingerprint, testRec); err != nil {
		t.Fatalf("delete one of two keys: %v", err)
	}
	if n, err := s.CountEnabledAdmins(ctx); err != nil || n != 1 {
		t.Fatalf("admins: %d %v", n, err)
	}
	users, err := s.ListUsers(ctx)
	if err != nil || len(users) != 1 || users[0].Name != "alice" || users[0].Disabled {
		t.Fatalf("users: %+v %v", users, err)
	}
	// Every change above that succeeded wrote its audit row with it; the
	// failed ones wrote none.
	rows, err := s.ListAudit(ctx, audit.Filter{User: "test"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("audit rows: %d %v, want 3 (create, add key, delete key)", len(rows), err)
	}
}

func bytesEq(a, b []byte) bool { return string(a) == string(b) }

// TestConcurrentLastAdmin is the regression the write lock exists for: two
// gateways disabling the only two admins at once must not both succeed
// (under plain READ COMMITTED both would see two admins).
func TestConcurrentLastAdmin(t *testing.T) {
	ctx := context.Background()
	dsn := freshDB(t)
	a, b := open(t, dsn), open(t, dsn)
	for _, n := range []string{"ann", "ben"} {
		if _, err := a.CreateUser(ctx, keys.User{Name: n, Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, n)}, testRec); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Add(2)
		go func() { defer wg.Done(); e1 = a.SetUserDisabled(ctx, "ann", true, testRec) }()
		go func() { defer wg.Done(); e2 = b.SetUserDisabled(ctx, "ben", true, testRec) }()
		wg.Wait()
		if n, _ := a.CountEnabledAdmins(ctx); n != 1 {
			t.Fatalf("after racing disables (%v, %v): %d enabled admins, want 1", e1, e2, n)
		}
		if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, keys.ErrLastAdmin) || errors.Is(e2, keys.ErrLastAdmin)) {
			t.Fatalf("racing disables: %v, %v; want one ErrLastAdmin", e1, e2)
		}
		for _, n := range []string{"ann", "ben"} {
			if err := a.SetUserDisabled(ctx, n, false, testRec); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	s := open(t, freshDB(t))
	if _, err := s.CreateUser(ctx, keys.User{Name: "carol", Role: keys.RoleOperator, Created: time.Now()}, nil, testRec); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	k := keys.APIKey{ID: "k1", User: "carol", Name: "ci", Scopes: []string{"read", "write"}, Created: now, Expires: now.Add(time.Hour)}
	if err := s.CreateAPIKey(ctx, k, []byte("hash"), testRec); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAPIKey(ctx, k, []byte("hash"), testRec); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	got, hash, u, err := s.APIKeyByID(ctx, "k1")
	if err != nil || string(hash) != "hash" || u.Name != "carol" || !got.Expires.Equal(k.Expires) || !got.Revoked.IsZero() || !slices.Equal(got.Scopes, k.Scopes) {
		t.Fatalf("api key: %+v %q %+v %v", got, hash, u, err)
	}
	if err := s.TouchAPIKey(ctx, "k1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, "carol", "k1", now.Add(2*time.Minute), testRec); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, "carol", "k1", now.Add(3*time.Minute), testRec); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListAPIKeys(ctx, "carol")
	if err != nil || len(list) != 1 || !list[0].Revoked.Equal(now.Add(2*time.Minute)) || !list[0].LastUsed.Equal(now.Add(time.Minute)) {
		t.Fatalf("list: %+v %v (revoking twice keeps the first time)", list, err)
	}
	if err := s.RevokeAPIKey(ctx, "carol", "nope", now, testRec); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
}

func TestAuditFilter(t *testing.T) {
	ctx := context.Background()
	s := open(t, freshDB(t))
	t0 := time.Now().UTC()
	for i := range 5 {
		actor := "x"
		if i%2 == 1 {
			actor = "y"
		}
		if _, err := s.InsertAudit(ctx, audit.Entry{Time: t0.Add(time.Duration(i) * time.Second), Actor: actor, Front: "ssh", Action: "a", Target: fmt.Sprint(i), Detail: "bad\x1b[31m"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.InsertAudit(ctx, audit.Entry{Actor: "x"}); err == nil {
		t.Fatal("audit row without action accepted")
	}
	rows, err := s.ListAudit(ctx, audit.Filter{User: "x", Since: t0.Add(time.Second), Limit: 1})
	if err != nil || len(rows) != 1 || rows[0].Target != "4" || rows[0].Result != audit.ResultOK {
		t.Fatalf("filtered audit: %+v %v", rows, err)
	}
	if strings.ContainsRune(rows[0].Detail, 0x1b) {
		t.Fatalf("control character stored: %q", rows[0].Detail)
	}
	all, _ := s.ListAudit(ctx, audit.Filter{})
	if len(all) != 5 || all[0].Target != "4" {
		t.Fatalf("all audit rows, newest first: %+v", all)
	}
}

func TestAccountsDefault(t *testing.T) {
	ctx := context.Background()
	s := open(t, freshDB(t))
	if _, err := s.CreateUser(ctx, keys.User{Name: "dan", Role: keys.RoleOperator, Created: time.Now()}, nil, testRec); err != nil {
		t.Fatal(err)
	}
	add := func(name string) accounts.Account {
		a, err := s.InsertAccount(ctx, accounts.Account{Owner: "dan", Name: name, Host: "https://github.com", Masked: "ghp_…" + name, Created: time.Now()}, []byte("sealed-"+name), testRec)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := add("work"); !a.Default {
		t.Fatal("first account is not the default")
	}
	if a := add("home"); a.Default {
		t.Fatal("second account is the default")
	}
	if _, err := s.InsertAccount(ctx, accounts.Account{Owner: "dan", Name: "work", Created: time.Now()}, []byte("x"), testRec); !errors.Is(err, keys.ErrExists) {
		t.Fatalf("duplicate account: %v", err)
	}
	if _, err := s.InsertAccount(ctx, accounts.Account{Owner: "nobody", Name: "x", Created: time.Now()}, []byte("x"), testRec); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("unknown owner: %v", err)
	}
	if err := s.SetDefaultAccount(ctx, "dan", "home", testRec); err != nil {
		t.Fatal(err)
	}
	recs, err := s.ListAccounts(ctx, "dan")
	if err != nil || len(recs) != 2 || recs[0].Name != "home" || !recs[0].Default || recs[1].Default || string(recs[1].Sealed) != "sealed-work" {
		t.Fatalf("accounts: %+v %v", recs, err)
	}
	if err := s.DeleteAccount(ctx, "dan", "home", testRec); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAccount(ctx, "dan", "home", testRec); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	recs, _ = s.ListAccounts(ctx, "dan")
	if len(recs) != 1 || recs[0].Default {
		t.Fatalf("after deleting the default: %+v (no default left)", recs)
	}
}

func TestFleetBoxesAndInbox(t *testing.T) {
	ctx := context.Background()
	dsn := freshDB(t)
	a, b := open(t, dsn), open(t, dsn) // two gateways, one fleet
	doc := []byte(`{"name":"fix","task":"é ü \u0000-free"}`)
	if err := a.InsertBox(ctx, fleet.BoxDoc{Name: "fix", Owner: "erin", State: "creating", Doc: doc}, testRec); err != nil {
		t.Fatal(err)
	}
	if err := b.InsertBox(ctx, fleet.BoxDoc{Name: "fix", Owner: "erin", State: "creating", Doc: doc}, testRec); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("same box through the other gateway: %v", err)
	}
	got, err := b.GetBox(ctx, "fix")
	if err != nil || string(got.Doc) != string(doc) || got.Owner != "erin" {
		t.Fatalf("box through the other gateway: %+v %v", got, err)
	}
	if err := b.UpdateBox(ctx, fleet.BoxDoc{Name: "fix", Owner: "erin", State: "running", Doc: doc}, audit.Entry{}); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateBox(ctx, fleet.BoxDoc{Name: "gone", State: "running", Doc: doc}, audit.Entry{}); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("update unknown box: %v", err)
	}
	list, err := a.ListBoxes(ctx)
	if err != nil || len(list) != 1 || list[0].State != "running" {
		t.Fatalf("boxes: %+v %v", list, err)
	}
	id1, err := a.AddInbox(ctx, "fix", "erin", "also fix the docs", time.Now(), testRec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddInbox(ctx, "fix", "erin", "and the tests", time.Now(), testRec); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddInbox(ctx, "nobox", "erin", "x", time.Now(), testRec); !errors.Is(err, fleet.ErrNotFound) {
		t.Fatalf("inbox of an unknown box: %v", err)
	}
	items, err := b.ListInbox(ctx, "fix")
	if err != nil || len(items) != 2 || items[0].ID != id1 || items[1].Text != "and the tests" {
		t.Fatalf("inbox: %+v %v", items, err)
	}
	if found, err := a.DeleteInbox(ctx, "fix", id1, testRec); err != nil || !found {
		t.Fatalf("delete inbox item: %v %v", found, err)
	}
	if found, err := b.DeleteInbox(ctx, "fix", id1, testRec); err != nil || found {
		t.Fatalf("delete it again: %v %v", found, err)
	}
	if err := a.DeleteBox(ctx, "fix", testRec); err != nil {
		t.Fatal(err)
	}
	if items, _ := b.ListInbox(ctx, "fix"); len(items) != 0 {
		t.Fatalf("inbox outlived its box: %+v", items)
	}
}

// TestLoginLinkRaceAcrossGateways: one link, many browsers through two
// gateways at once, one session.
func TestLoginLinkRaceAcrossGateways(t *testing.T) {
	ctx := context.Background()
	dsn := freshDB(t)
	a, b := open(t, dsn), open(t, dsn)
	if _, err := a.CreateUser(ctx, keys.User{Name: "fay", Role: keys.RoleOperator, Created: time.Now()}, nil, testRec); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	hash := []byte("0123456789abcdef0123456789abcdef")
	if err := a.CreateLoginLink(ctx, "fay", hash, now, now.Add(time.Minute), testRec); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 10 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := s.UseLoginLink(ctx, hash, time.Now())
			if err == nil && u.Name == "fay" {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, keys.ErrNotFound) {
				t.Errorf("use link: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d browsers got a session from one link", wins)
	}
	ws := keys.WebSession{ID: "s1", User: "fay", Created: now, LastSeen: now, Addr: "192.0.2.9", Agent: "test"}
	if err := a.CreateWebSession(ctx, ws, testRec); err != nil {
		t.Fatal(err)
	}
	if err := b.TouchWebSession(ctx, "s1", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, u, err := b.WebSession(ctx, "s1")
	if err != nil || u.Name != "fay" || got.LastSeen.UnixNano() != now.Add(time.Minute).UnixNano() || got.Addr != "192.0.2.9" {
		t.Fatalf("session: %+v %+v %v", got, u, err)
	}
	if err := a.DeleteWebSession(ctx, "fay", "s1", testRec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.WebSession(ctx, "s1"); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("revoked session still there for the other gateway: %v", err)
	}
	ss := b.SessionStore(nil)
	if err := ss.Commit("tok", []byte("data"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := a.SessionStore(nil).Find("tok"); err != nil || !ok || string(d) != "data" {
		t.Fatalf("scs session through the other gateway: %q %v %v", d, ok, err)
	}
}

// TestLeaseOnce: a timer firing on every gateway acts once.
func TestLeaseOnce(t *testing.T) {
	ctx := context.Background()
	dsn := freshDB(t)
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
	s := open(t, freshDB(t))
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
	dsn := freshDB(t)
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
	dsn := freshDB(t)
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
