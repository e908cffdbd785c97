package store

import (
	"bytes"
	"crypto/ed25519"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/pgtest"
	"sbx.dev/sbx/keys"
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
	last := ms[len(ms)-1].version
	next := last + 1
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
	if tables != 0 || version != last {
		t.Fatalf("after a failed migration: table half present %d, schema version %d; want 0 and %d", tables, version, last)
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

// TestMigratesFromEveryVersion: a database an older sbx left at any
// earlier schema version migrates to this one and keeps its rows, in both
// dialects.
func TestMigratesFromEveryVersion(t *testing.T) {
	all, err := sqliteDialect().migrations()
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v < len(all); v++ {
		t.Run(fmt.Sprint("from-", all[v-1].version), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sbx.db")
			pg := ""
			for _, c := range []struct {
				name, driver string
				d            dialect
				// Both take the subtest's t: a skip or failure there must end
				// the subtest, not its parent from another goroutine.
				dsn  func(t *testing.T) string
				open func(t *testing.T) *Store
			}{
				{"sqlite", "sqlite", sqliteDialect(), func(*testing.T) string { return dsn(path, false) },
					func(t *testing.T) *Store { return open(t, path).Store }},
				{"postgres", "pgx", postgresDialect(), func(t *testing.T) string { pg = pgtest.FreshDB(t); return pg },
					func(t *testing.T) *Store { return openPostgres(t, pg) }},
			} {
				t.Run(c.name, func(t *testing.T) {
					db, err := sql.Open(c.driver, c.dsn(t))
					if err != nil {
						t.Fatal(err)
					}
					old := &Store{d: c.d, writer: db, reader: db}
					ms, err := c.d.migrations()
					if err != nil {
						t.Fatal(err)
					}
					if err := old.apply(ctx, ms[:v]); err != nil {
						t.Fatal(err)
					}
					if _, err := old.CreateUser(ctx, keys.User{Name: "alice", Role: keys.RoleAdmin, Created: time.Now()}, []keys.Key{newKey(t, "alice")}, testRec); err != nil {
						t.Fatal(err)
					}
					old.Close()
					s := c.open(t)
					var n, max int
					if err := s.read().queryRow(ctx, "SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &max); err != nil {
						t.Fatal(err)
					}
					if n != len(all) || max != SchemaVersion() {
						t.Errorf("schema_migrations has %d rows up to %d, want %d up to %d", n, max, len(all), SchemaVersion())
					}
					if ks, err := s.ListKeys(ctx, "alice"); err != nil || len(ks) != 1 {
						t.Errorf("alice's keys after migrating from version %d: %v %v", v, ks, err)
					}
				})
			}
		})
	}
}

// TestOpensDatabaseOfV5: databases written by the sbx of schema version 5,
// before the two dialects were one implementation, open with every row and
// take new writes. testdata/v5-sqlite.db is the file that sbx's store.Open
// wrote; testdata/v5-postgres.sql is pg_dump --inserts of the database its
// postgres.Open wrote (psql's \restrict lines dropped), leases included.
func TestOpensDatabaseOfV5(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		b, err := os.ReadFile("testdata/v5-sqlite.db")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "sbx.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		checkV5(t, open(t, path).Store)
	})
	t.Run("postgres", func(t *testing.T) {
		dump, err := os.ReadFile("testdata/v5-postgres.sql")
		if err != nil {
			t.Fatal(err)
		}
		dsn := pgtest.FreshDB(t)
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Exec(ctx, string(dump))
		c.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkV5(t, openPostgres(t, dsn))
	})
}

// checkV5 checks the rows the v5 fixtures hold, then writes new ones.
func checkV5(t *testing.T, s *Store) {
	t.Helper()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	rows, err := s.read().query(ctx, "SELECT name FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	want := []string{"0001_init.sql", "0002_accounts.sql", "0003_fleet.sql", "0004_web.sql", "0005_mcp.sql"}
	if !slices.Equal(names[:min(len(names), len(want))], want) {
		t.Errorf("migration history %v, want it to start %v", names, want)
	}
	pk, err := ssh.NewPublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)).Public())
	if err != nil {
		t.Fatal(err)
	}
	if u, err := s.GetUser(ctx, "alice"); err != nil || u.Role != keys.RoleAdmin || !u.Created.Equal(t0) {
		t.Errorf("alice: %+v %v", u, err)
	}
	if u, err := s.GetUser(ctx, "bob"); err != nil || u.Role != keys.RoleOperator {
		t.Errorf("bob: %+v %v", u, err)
	}
	if k, u, err := s.KeyByFingerprint(ctx, ssh.FingerprintSHA256(pk)); err != nil || u.Name != "alice" || k.Comment != "fixture" || !bytes.Equal(k.PublicKey.Marshal(), pk.Marshal()) {
		t.Errorf("alice's key: %+v %+v %v", k, u, err)
	}
	if k, hash, u, err := s.APIKeyByID(ctx, "k1"); err != nil || string(hash) != "hash-k1" || u.Name != "alice" ||
		!slices.Equal(k.Scopes, []string{"read", "write"}) || !k.Expires.Equal(t0.Add(24*time.Hour)) || !k.Revoked.IsZero() {
		t.Errorf("api key k1: %+v %q %+v %v", k, hash, u, err)
	}
	// An account from before identities were kept reads as never checked.
	if recs, err := s.ListAccounts(ctx, "alice"); err != nil || len(recs) != 1 || recs[0].Name != "work" || !recs[0].Default || string(recs[0].Sealed) != "sealed-work" ||
		recs[0].Identity.Checked() || recs[0].Identity.HasScopes || !recs[0].Identity.Expires.IsZero() {
		t.Errorf("accounts: %+v %v", recs, err)
	}
	if b, err := s.GetBox(ctx, "fix"); err != nil || b.State != "running" || string(b.Doc) != `{"name":"fix"}` {
		t.Errorf("box: %+v %v", b, err)
	}
	items, err := s.ListInbox(ctx, "fix")
	if err != nil || len(items) != 1 || items[0].Text != "also the docs" || !items[0].At.Equal(t0) {
		t.Fatalf("inbox: %+v %v", items, err)
	}
	if ms, err := s.ListMCPServers(ctx, "alice"); err != nil || len(ms) != 1 || string(ms[0].Headers) != "sealed-headers" {
		t.Errorf("MCP servers: %+v %v", ms, err)
	}
	if ws, u, err := s.WebSession(ctx, "ws1"); err != nil || u.Name != "alice" || ws.Addr != "192.0.2.1" {
		t.Errorf("web session: %+v %+v %v", ws, u, err)
	}
	if d, ok, err := s.SessionStore(nil).Find("tok"); err != nil || !ok || string(d) != "data" {
		t.Errorf("scs session: %q %v %v", d, ok, err)
	}
	audited, err := s.ListAudit(ctx, audit.Filter{User: "fixture"})
	if err != nil || len(audited) != 8 {
		t.Fatalf("audit rows: %d %v, want 8", len(audited), err)
	}
	// New rows get new ids after the old ones.
	if _, err := s.CreateUser(ctx, keys.User{Name: "carol", Role: keys.RoleOperator, Created: time.Now()}, []keys.Key{newKey(t, "carol")}, testRec); err != nil {
		t.Fatal(err)
	}
	if id, err := s.AddInbox(ctx, "fix", "alice", "and the tests", time.Now(), testRec); err != nil || id <= items[0].ID {
		t.Errorf("new inbox item: id %d (old %d) %v", id, items[0].ID, err)
	}
	if id, err := s.InsertAudit(ctx, testRec); err != nil || id <= audited[0].ID {
		t.Errorf("new audit row: id %d (newest old %d) %v", id, audited[0].ID, err)
	}
}

// TestMigrationMergedLaterStillApplies: branches take migration numbers
// ahead of each other, so a database may hold a higher number before a
// lower one exists in the binary; the lower one still runs when it arrives,
// once.
func TestMigrationMergedLaterStillApplies(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "sbx.db"))
	ms, err := s.d.migrations()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1].version
	late := migration{version: last + 1, name: fmt.Sprintf("%04d_late.sql", last+1), sql: "CREATE TABLE late (x INTEGER)"}
	later := migration{version: last + 2, name: fmt.Sprintf("%04d_later.sql", last+2), sql: "CREATE TABLE later (x INTEGER)"}
	if err := s.apply(ctx, append(ms[:len(ms):len(ms)], later)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.apply(ctx, append(ms[:len(ms):len(ms)], late, later)); err != nil {
			t.Fatalf("the late migration: %v", err)
		}
	}
	var n int
	if err := s.reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('late', 'later')").Scan(&n); err != nil || n != 2 {
		t.Fatalf("tables late and later: %d %v", n, err)
	}
	if err := s.reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms)+2 {
		t.Fatalf("schema_migrations rows: %d %v, want %d", n, err, len(ms)+2)
	}
}
