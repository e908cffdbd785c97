package store

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailedMigrationLeavesNothing: a migration runs in one transaction with
// its schema_migrations row, so one that fails halfway leaves neither its
// first statements nor a version behind, and the next start applies it whole.
func TestFailedMigrationLeavesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	s := open(t, path)
	ms, err := s.d.migrations()
	if err != nil {
		t.Fatal(err)
	}
	next := len(ms) + 1
	name := fmt.Sprintf("%04d_half.sql", next)
	broken := append(ms[:len(ms):len(ms)], migration{version: next, name: name, sql: `
		CREATE TABLE half (x INTEGER NOT NULL);
		INSERT INTO half (x) VALUES (1);
		INSERT INTO no_such_table (x) VALUES (1);`})
	err = s.apply(ctx, broken)
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("broken migration: got %v, want an error naming %s", err, name)
	}
	var tables, version int
	if err := s.reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := s.reader.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if tables != 0 || version != len(ms) {
		t.Fatalf("after a failed migration: table half present %d, schema version %d; want 0 and %d", tables, version, len(ms))
	}
	if got, err := s.IntegrityCheck(ctx); err != nil || got != "ok" {
		t.Fatalf("integrity check %q, %v", got, err)
	}

	fixed := append(ms[:len(ms):len(ms)], migration{version: next, name: name, sql: `
		CREATE TABLE half (x INTEGER NOT NULL);
		INSERT INTO half (x) VALUES (1);`})
	if err := s.apply(ctx, fixed); err != nil {
		t.Fatalf("fixed migration: %v", err)
	}
	var rows int
	if err := s.reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM half").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := s.reader.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || version != next {
		t.Fatalf("after the fixed migration: %d rows, version %d; want 1 and %d", rows, version, next)
	}
}

// TestPragmasOnEveryConnection: WAL, the busy timeout, foreign keys and
// synchronous=FULL hold on the writer and on every reader connection (they
// are per connection in SQLite), readers are query-only, and a foreign key
// is really enforced.
func TestPragmasOnEveryConnection(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "sbx.db"))
	want := map[string]string{
		"journal_mode": "wal",
		"busy_timeout": fmt.Sprint(busyTimeout.Milliseconds()),
		"foreign_keys": "1",
		"synchronous":  "2", // FULL
	}
	for _, c := range []struct {
		who       string
		queryOnly string
		get       func(pragma string) (string, error)
	}{
		{"writer", "0", func(p string) (v string, err error) {
			err = s.writer.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v)
			return v, err
		}},
		{"reader", "1", func(p string) (v string, err error) {
			err = s.reader.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v)
			return v, err
		}},
	} {
		for p, w := range want {
			if got, err := c.get(p); err != nil || got != w {
				t.Errorf("%s: PRAGMA %s = %q (%v), want %q", c.who, p, got, err, w)
			}
		}
		if got, err := c.get("query_only"); err != nil || got != c.queryOnly {
			t.Errorf("%s: PRAGMA query_only = %q (%v), want %q", c.who, got, err, c.queryOnly)
		}
	}
	// Several reader connections at once: each one has the pragmas.
	conns := make([]interface{ Close() error }, 0, 4)
	for i := range 4 {
		conn, err := s.reader.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		var fk, bt string
		if err := conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&bt); err != nil {
			t.Fatal(err)
		}
		if fk != "1" || bt != want["busy_timeout"] {
			t.Errorf("reader connection %d: foreign_keys %q busy_timeout %q", i, fk, bt)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if _, err := s.writer.ExecContext(ctx, `INSERT INTO ssh_keys (user_id, fingerprint, type, public_key, created)
		VALUES (424242, 'SHA256:orphan', 'ssh-ed25519', 'x', 0)`); err == nil || !strings.Contains(err.Error(), "FOREIGN KEY") {
		t.Errorf("a key of no user was inserted: %v", err)
	}
}
