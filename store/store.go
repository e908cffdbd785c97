// Package store keeps sbx's state in SQL, behind the small interfaces the
// core talks to (keys.Store, keys.WebStore, audit.Store, accounts.Store,
// fleet.Store, fleet.MCPStore). One implementation over database/sql serves
// two databases: SQLite (modernc.org/sqlite, pure Go, so the binary stays
// static) for a gateway on its own, and PostgreSQL (pgx's database/sql
// driver) for gateways that share one database (store/postgres adds what
// only a shared database needs).
//
// Queries are written once with ? placeholders; rebind turns them into
// PostgreSQL's $1, $2, … in one place. Each dialect has its own migrations
// folder (migrations/sqlite, migrations/postgres) with the same numbers and
// names, so a schema_migrations row means the same in both.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

// Store is the SQL store. Writes run one at a time (SQLite: one connection
// whose transactions begin IMMEDIATE; PostgreSQL: one advisory lock per
// transaction), so the checks that guard invariants across rows (the last
// enabled admin, one default account) see every committed write. Reads never
// wait for writers.
type Store struct {
	d      dialect
	writer *sql.DB
	reader *sql.DB // the writer's pool on PostgreSQL
}

var (
	_ keys.Store     = (*Store)(nil)
	_ keys.WebStore  = (*Store)(nil)
	_ audit.Store    = (*Store)(nil)
	_ accounts.Store = (*Store)(nil)
	_ fleet.Store    = (*Store)(nil)
	_ fleet.MCPStore = (*Store)(nil)
)

//go:embed migrations/*/*.sql
var migrationFiles embed.FS

// dialect is what differs between the databases; the queries do not.
type dialect struct {
	name string // the folder of its migrations
	// numbered: placeholders are $1, $2, … rather than ?.
	numbered bool
	// bootstrap creates the migration ledger.
	bootstrap string
	// lock, when set, is the statement a write transaction runs first, with
	// one of the lock keys below: it makes writers through other pools (other
	// gateways) take turns.
	lock string
}

// Advisory lock keys (pg_advisory_xact_lock takes a bigint).
const (
	lockMigrate int64 = 0x5b5_0001
	lockWrite   int64 = 0x5b5_0002
)

func sqliteDialect() dialect {
	return dialect{name: "sqlite", bootstrap: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied INTEGER NOT NULL)`}
}

func postgresDialect() dialect {
	return dialect{name: "postgres", numbered: true, lock: "SELECT pg_advisory_xact_lock(?)",
		bootstrap: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied BIGINT NOT NULL)`}
}

// rebind writes query's ? placeholders in the dialect's form. Queries hold
// no ? inside string literals; rebind skips quoted text all the same.
func (d dialect) rebind(query string) string {
	if !d.numbered || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// runner is what a pool and a transaction share.
type runner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// conn runs queries written with ? on a pool or a transaction, rebound for
// its dialect.
type conn struct {
	r runner
	d dialect
}

func (c conn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return c.r.ExecContext(ctx, c.d.rebind(query), args...)
}

func (c conn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return c.r.QueryContext(ctx, c.d.rebind(query), args...)
}

func (c conn) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return c.r.QueryRowContext(ctx, c.d.rebind(query), args...)
}

// read is the pool for reads; write is the pool for writes outside a
// transaction (one statement).
func (s *Store) read() conn  { return conn{s.reader, s.d} }
func (s *Store) write() conn { return conn{s.writer, s.d} }

// OpenPostgres opens the store on db, a PostgreSQL pool of pgx's
// database/sql driver, and applies pending migrations. It refuses a
// database written by a newer sbx. Closing the store closes db.
func OpenPostgres(ctx context.Context, db *sql.DB) (*Store, error) {
	s := &Store{d: postgresDialect(), writer: db, reader: db}
	if err := s.migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	if s.reader == s.writer {
		return s.writer.Close()
	}
	return errors.Join(s.reader.Close(), s.writer.Close())
}

type migration struct {
	version int
	name    string
	sql     string
	// after, when set, runs in the migration's transaction after its SQL:
	// the rows a rule of the core must compute (migrationSteps).
	after func(ctx context.Context, tx conn) error
}

// migrations reads the dialect's migrations in order of their numbers,
// each number once. A number may be missing (branches that each took one
// merge in any order): apply runs every migration the database lacks.
func (d dialect) migrations() ([]migration, error) {
	dir := "migrations/" + d.name
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || !strings.HasSuffix(e.Name(), ".sql") {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b), after: migrationSteps()[e.Name()]})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s: one number twice", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
}

// SchemaVersion is the highest migration this binary knows (the same in
// both dialects; a test keeps the sets equal).
func SchemaVersion() int {
	ms, err := sqliteDialect().migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

func (s *Store) migrate(ctx context.Context) error {
	ms, err := s.d.migrations()
	if err != nil {
		return err
	}
	return s.apply(ctx, ms)
}

// apply runs the migrations ms (in order of their numbers) the database
// lacks, each in its own transaction with its schema_migrations row: a
// migration that fails leaves nothing of itself behind. Each transaction
// holds the migration lock and reads the ledger afresh, so gateways
// starting together migrate once.
func (s *Store) apply(ctx context.Context, ms []migration) error {
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	// pending reads the ledger; applied says whether version is in it.
	pending := func(tx conn, version int) (applied bool, err error) {
		if _, err := tx.exec(ctx, s.d.bootstrap); err != nil {
			return false, fmt.Errorf("create schema_migrations: %w", err)
		}
		var cur, have int
		if err := tx.queryRow(ctx, "SELECT COALESCE(MAX(version), 0), COUNT(CASE WHEN version = ? THEN 1 END) FROM schema_migrations", version).Scan(&cur, &have); err != nil {
			return false, fmt.Errorf("read schema version: %w", err)
		}
		if cur > known {
			return false, fmt.Errorf("database schema version %d is newer than this sbx (knows up to %d): upgrade sbx", cur, known)
		}
		return have > 0, nil
	}
	if known == 0 {
		return s.tx(ctx, lockMigrate, func(tx conn) error {
			_, err := pending(tx, 0)
			return err
		})
	}
	for _, m := range ms {
		err := s.tx(ctx, lockMigrate, func(tx conn) error {
			applied, err := pending(tx, m.version)
			if err != nil || applied {
				return err
			}
			if _, err := tx.exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			if m.after != nil {
				if err := m.after(ctx, tx); err != nil {
					return fmt.Errorf("apply migration %s: %w", m.name, err)
				}
			}
			if _, err := tx.exec(ctx, "INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)",
				m.version, m.name, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("record migration %s: %w", m.name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// tx runs fn in a write transaction holding the lock key (SQLite: BEGIN
// IMMEDIATE on the single writer) and commits if fn returns nil.
func (s *Store) tx(ctx context.Context, key int64, fn func(conn) error) error {
	sqlTx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return busy(fmt.Errorf("begin: %w", err))
	}
	// SQLite's writer pool has one connection: a transaction left open by a
	// panic would block every later write, so roll back before re-panicking.
	defer func() {
		if p := recover(); p != nil {
			_ = sqlTx.Rollback()
			panic(p)
		}
	}()
	tx := conn{sqlTx, s.d}
	if s.d.lock != "" {
		if _, err := tx.exec(ctx, s.d.lock, key); err != nil {
			_ = sqlTx.Rollback()
			return fmt.Errorf("take write lock: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		_ = sqlTx.Rollback()
		return busy(err)
	}
	if err := sqlTx.Commit(); err != nil {
		return busy(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// busy says so when err is SQLite's lock held past the busy timeout by
// another process (a backup, an operator's sqlite3 shell): a failure of
// the moment, worth retrying, not a bug of the request (found by the
// fault suite, "SQLite locked by another process").
func busy(err error) error {
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	if c := se.Code() & 0xff; c != sqlite3.SQLITE_BUSY && c != sqlite3.SQLITE_LOCKED {
		return err
	}
	return fmt.Errorf("the database is locked by another process, try again shortly (%w): %w", err, errkind.Unavailable)
}

// update runs fn in a write transaction holding the write lock.
func (s *Store) update(ctx context.Context, fn func(conn) error) error {
	return s.tx(ctx, lockWrite, fn)
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isForeignKey reports whether err is a foreign key violation.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

func nanos(t time.Time) int64 { return t.UnixNano() }

// nullNanos maps the zero time to NULL.
func nullNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}
