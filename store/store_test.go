package store

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

var (
	ctx     = context.Background()
	testRec = audit.Entry{Actor: "test", Front: "cli", Action: "test"}
)

func TestMain(m *testing.M) {
	// The crash test re-executes this binary as the writer it kills.
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func open(t testing.TB, path string) *SQLite {
	t.Helper()
	s, err := Open(ctx, path)
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

func TestMigrationsIdempotent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "sbx.db")
	s := open(t, path)
	if _, err := s.CreateUser(ctx, keys.User{Name: "alice", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "alice")}, testRec); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for range 2 {
		s = open(t, path)
		var n, max int
		if err := s.reader.QueryRowContext(ctx, "SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &max); err != nil {
			t.Fatal(err)
		}
		ms, err := s.d.migrations()
		if err != nil {
			t.Fatal(err)
		}
		if n != len(ms) || max != SchemaVersion() || n < 1 {
			t.Errorf("schema_migrations has %d rows up to %d, want %d up to %d", n, max, len(ms), SchemaVersion())
		}
		if u, err := s.GetUser(ctx, "alice"); err != nil || u.Role != keys.RoleAdmin {
			t.Errorf("alice after reopen: %+v %v", u, err)
		}
		s.Close()
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("database mode %o, want 600", st.Mode().Perm())
	}
	var mode, fk string
	s = open(t, path)
	s.writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	s.writer.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk)
	if mode != "wal" || fk != "1" {
		t.Errorf("journal_mode %q foreign_keys %q, want wal 1", mode, fk)
	}
}

func TestRefusesNewerDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	s := open(t, path)
	if _, err := s.writer.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied) VALUES (999, '0999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "schema version 999 is newer than this sbx") {
		t.Fatalf("got %v, want a refusal of version 999", err)
	}
}

func TestOpenRefusesBadPath(t *testing.T) {
	for _, p := range []string{"", "a?mode=ro", "x#y"} {
		if _, err := Open(ctx, p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
	notDB := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(notDB, []byte(strings.Repeat("not a database ", 100)), 0o600)
	if _, err := Open(ctx, notDB); err == nil {
		t.Error("opened a file that is not a database")
	}
}

// Two handles on one file, as two gateway processes would have, writing at
// once: IMMEDIATE transactions and the busy timeout serialise them without
// SQLITE_BUSY or deadlock.
func TestConcurrentWriters(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		a, b := connect(t), connect(t)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for w, s := range []*Store{a, b, a, b} {
			wg.Go(func() {
				for i := range 15 {
					name := fmt.Sprintf("u%d-%d", w, i)
					if _, err := s.CreateUser(ctx, keys.User{Name: name, Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, name)}, testRec); err != nil {
						errs <- err
					}
					if err := s.SetUserDisabled(ctx, name, true, testRec); err != nil && !errors.Is(err, keys.ErrLastAdmin) {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		users, _ := a.ListUsers(ctx)
		if len(users) != 60 {
			t.Errorf("%d users, want 60", len(users))
		}
		// With every admin racing to disable, exactly one stays enabled.
		if n, _ := b.CountEnabledAdmins(ctx); n != 1 {
			t.Errorf("%d enabled admins after racing disables, want 1", n)
		}
	})
}

func TestAuditRoundTrip(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		s := connect(t)
		t0 := time.Date(2026, 11, 29, 10, 0, 0, 123, time.UTC)
		for i := range 5 {
			e := audit.Entry{Time: t0.Add(time.Duration(i) * time.Minute), Actor: []string{"a", "b"}[i%2], Front: "ssh",
				Action: "user.add", Target: fmt.Sprint(i), Addr: "192.0.2.1", Result: audit.ResultOK, Detail: "d"}
			if _, err := s.InsertAudit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.ListAudit(ctx, audit.Filter{User: "a", Since: t0.Add(time.Minute), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Target != "4" || got[1].Target != "2" || !got[0].Time.Equal(t0.Add(4*time.Minute)) {
			t.Errorf("got %+v", got)
		}
	})
}

func TestErrorsAreSentinels(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		s := connect(t)
		k := newKey(t, "a")
		if _, err := s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{k}, testRec); err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			name string
			err  error
			want error
		}{
			{"dup user", second(s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleOperator}, []keys.Key{newKey(t, "a")}, testRec)), keys.ErrExists},
			{"dup key", second(s.CreateUser(ctx, keys.User{Name: "b", Role: keys.RoleOperator}, []keys.Key{k}, testRec)), keys.ErrExists},
			{"missing user", second(s.GetUser(ctx, "zz")), keys.ErrNotFound},
			{"keys of missing user", second(s.ListKeys(ctx, "zz")), keys.ErrNotFound},
			{"add keys to missing user", s.AddKeys(ctx, "zz", []keys.Key{newKey(t, "zz")}, testRec), keys.ErrNotFound},
			{"unknown fingerprint", third(s.KeyByFingerprint(ctx, "SHA256:x")), keys.ErrNotFound},
			{"unknown api key", fourth(s.APIKeyByID(ctx, "nope")), keys.ErrNotFound},
			{"revoke unknown api key", s.RevokeAPIKey(ctx, "a", "nope", time.Now(), testRec), keys.ErrNotFound},
			{"last admin", s.DeleteUser(ctx, "a", testRec), keys.ErrLastAdmin},
		}
		for _, c := range checks {
			if !errors.Is(c.err, c.want) {
				t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
			}
		}
		if _, err := s.GetUser(ctx, "b"); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("user b was half-written: %v", err)
		}
	})
}

func second[T any](_ T, err error) error                 { return err }
func third[T, U any](_ T, _ U, err error) error          { return err }
func fourth[T, U, V any](_ T, _ U, _ V, err error) error { return err }

func BenchmarkCreateUser(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "sbx.db"))
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("u%d", i)
		if _, err := s.CreateUser(ctx, keys.User{Name: name, Role: keys.RoleOperator, Created: time.Now()}, []keys.Key{newKey(b, name)}, testRec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeyByFingerprint(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "sbx.db"))
	k := newKey(b, "a")
	if _, err := s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleOperator, Created: time.Now()}, []keys.Key{k}, testRec); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := s.KeyByFingerprint(ctx, k.Fingerprint); err != nil {
			b.Fatal(err)
		}
	}
}

// Regression: the audit row of a change used to be written after the change
// committed, so a kill between the two kept the change and lost its row (the
// crash test found it). Now a failing audit insert undoes the change.
func TestRegressionAuditRowLostOnCrash(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		s := connect(t)
		broken := audit.Entry{} // no action: the insert fails
		if _, err := s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "a")}, broken); err == nil {
			t.Fatal("CreateUser succeeded with a failing audit row")
		}
		if _, err := s.GetUser(ctx, "a"); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("user kept without its audit row: %v", err)
		}
		if _, err := s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "a")}, testRec); err != nil {
			t.Fatal(err)
		}
		rows, _ := s.ListAudit(ctx, audit.Filter{})
		if len(rows) != 1 || rows[0].Action != "test" {
			t.Errorf("rows %+v", rows)
		}
	})
}

// A panic inside a write transaction must not leave the single writer
// connection stuck in that transaction.
func TestPanicInTransactionReleasesWriter(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		s := connect(t)
		func() {
			defer func() { recover() }()
			s.update(ctx, func(tx conn) error {
				tx.exec(ctx, "INSERT INTO users (name, role, created) VALUES ('p', 'admin', 0)")
				panic("boom")
			})
		}()
		done := make(chan error, 1)
		go func() {
			_, err := s.CreateUser(ctx, keys.User{Name: "a", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "a")}, testRec)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("writer stuck after a panic inside a transaction")
		}
		if _, err := s.GetUser(ctx, "p"); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("the panicking transaction's write was kept: %v", err)
		}
	})
}

// TestRegressionLockedDatabaseIsUnavailable: a write while another process
// held SQLite's lock failed with SQLite's bare words and no kind (exit 1,
// HTTP 500), as if the request were wrong; it is Unavailable now, saying
// what holds it (found by the fault suite).
func TestRegressionLockedDatabaseIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "sbx.db"))
	other, err := sql.Open("sqlite", filepath.Join(dir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	hold, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if _, err := hold.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	alice := keys.User{Name: "alice", Role: keys.RoleOperator, Created: time.Now()}
	_, err = s.CreateUser(ctx, alice, []keys.Key{newKey(t, "alice")}, testRec)
	if errkind.Of(err) != errkind.Unavailable || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("a write under another process's lock: %v (kind %v)", err, errkind.Of(err))
	}
	if _, err := hold.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx, alice, []keys.Key{newKey(t, "alice")}, testRec); err != nil {
		t.Fatalf("after the lock: %v", err)
	}
}
