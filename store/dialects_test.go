package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/internal/pgtest"
	"sbx.dev/sbx/keys"
)

// eachDialect runs fn against a fresh SQLite file and a fresh PostgreSQL
// database; connect opens another handle on the same database each time it
// is called (another gateway, or another process on the SQLite file).
func eachDialect(t *testing.T, fn func(t *testing.T, connect func(testing.TB) *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "sbx.db")
		fn(t, func(t testing.TB) *Store { return open(t, path).Store })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.FreshDB(t)
		fn(t, func(t testing.TB) *Store { return openPostgres(t, dsn) })
	})
}

func openPostgres(t testing.TB, dsn string) *Store {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenPostgres(ctx, db)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestUsersKeysAndLastAdmin(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
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
	})
}

// TestConcurrentLastAdmin is the regression the write lock exists for: two
// gateways disabling the only two admins at once must not both succeed
// (under plain READ COMMITTED both would see two admins).
func TestConcurrentLastAdmin(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		a, b := connect(t), connect(t)
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
	})
}

func TestAPIKeys(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
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
	})
}

func TestAuditFilter(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
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
	})
}

func TestAccountsDefault(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
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
	})
}

// TestAccountIdentityKept: who a token belongs to, its scopes and its
// expiry come back as saved, telling a fine-grained token (no scopes
// reported) from a classic one with none, and a token that never expires.
func TestAccountIdentityKept(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
		if _, err := s.CreateUser(ctx, keys.User{Name: "dan", Role: keys.RoleOperator, Created: time.Now()}, nil, testRec); err != nil {
			t.Fatal(err)
		}
		exp := time.Date(2027, 3, 4, 12, 0, 0, 0, time.UTC)
		want := map[string]accounts.Identity{
			"classic":      {Login: "dan-gh", Scopes: []string{"repo", "workflow"}, HasScopes: true, Expires: exp},
			"fine-grained": {Login: "dan-gh", Expires: exp},
			"no-scopes":    {Login: "octo-dan", HasScopes: true},
		}
		for name, id := range want {
			if _, err := s.InsertAccount(ctx, accounts.Account{Owner: "dan", Name: name, Host: "https://github.com", Masked: "ghp_…", Created: time.Now(), Identity: id}, []byte("x"), testRec); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := s.ListAccounts(ctx, "dan")
		if err != nil || len(recs) != len(want) {
			t.Fatalf("accounts: %+v %v", recs, err)
		}
		for _, r := range recs {
			got, w := r.Identity, want[r.Name]
			if got.Login != w.Login || !slices.Equal(got.Scopes, w.Scopes) || got.HasScopes != w.HasScopes || !got.Expires.Equal(w.Expires) {
				t.Errorf("%s: identity %+v, want %+v", r.Name, got, w)
			}
		}
	})
}

func TestFleetBoxesAndInbox(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		a, b := connect(t), connect(t) // two gateways, one fleet
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
	})
}

// TestLoginLinkRaceAcrossGateways: one link, many browsers through two
// gateways at once, one session.
func TestLoginLinkRaceAcrossGateways(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		a, b := connect(t), connect(t)
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
	})
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
	sqlite, pg := list("migrations/sqlite"), list("migrations/postgres")
	if !slices.Equal(sqlite, pg) {
		t.Fatalf("migrations differ:\n  sqlite (store/migrations/sqlite):     %v\n  postgres (store/migrations/postgres): %v", sqlite, pg)
	}
	if last := pg[len(pg)-1]; !strings.HasPrefix(last, fmt.Sprintf("%04d_", SchemaVersion())) {
		t.Fatalf("SchemaVersion %d, last migration file %s", SchemaVersion(), last)
	}
}

func bytesEq(a, b []byte) bool { return string(a) == string(b) }
