// Package store keeps sbx's state in SQLite (modernc.org/sqlite, pure Go, so
// the binary stays static). All SQL lives here; the core talks to the small
// interfaces keys.Store and audit.Store, which a PostgreSQL store can
// implement too.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// SQLite is the embedded store. Writes go through a single connection whose
// transactions begin IMMEDIATE, so two writers never deadlock upgrading a
// read lock; reads use a separate pool and, under WAL, never wait for writers.
type SQLite struct {
	path   string
	writer *sql.DB
	reader *sql.DB
}

var (
	_ keys.Store  = (*SQLite)(nil)
	_ audit.Store = (*SQLite)(nil)
)

// FileName is the database's name inside the data dir.
const FileName = "sbx.db"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// busyTimeout is how long a writer waits for another process's write lock.
const busyTimeout = 5 * time.Second

// dsn builds the modernc DSN. synchronous=FULL: in WAL mode NORMAL may lose
// the last commits on power loss; our writes are few (users, keys, audit rows)
// and each one is an operator action we must not forget, so an fsync per
// commit is the right price.
func dsn(path string, readOnly bool) string {
	q := []string{
		"_pragma=" + fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
		"_pragma=journal_mode(WAL)",
		"_pragma=foreign_keys(1)",
		"_pragma=synchronous(FULL)",
		"_txlock=immediate",
	}
	if readOnly {
		q = append(q, "_pragma=query_only(1)")
	}
	return "file:" + path + "?" + strings.Join(q, "&")
}

// Open opens (creating if needed) the database at path and applies pending
// migrations, each in its own transaction. It refuses a database written by a
// newer sbx.
func Open(ctx context.Context, path string) (*SQLite, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open store %q: path must be non-empty and contain no ? or #", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// Create the file owner-only before SQLite does (it would use 0644); it
	// holds key hashes and the audit log.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	} else {
		f.Close()
	}
	writer, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	s := &SQLite{path: path, writer: writer}
	if err := s.migrate(ctx); err != nil {
		writer.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// SQLite creates the -wal and -shm files with the default mode.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			writer.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	reader, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	reader.SetMaxOpenConns(4)
	s.reader = reader
	return s, nil
}

// Close closes the database.
func (s *SQLite) Close() error {
	return errors.Join(s.reader.Close(), s.writer.Close())
}

// Path is the database file.
func (s *SQLite) Path() string { return s.path }

// IntegrityCheck runs PRAGMA integrity_check and returns its verdict ("ok"
// when healthy).
func (s *SQLite) IntegrityCheck(ctx context.Context) (string, error) {
	var res []string
	rows, err := s.writer.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return "", fmt.Errorf("integrity check: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", fmt.Errorf("integrity check: %w", err)
		}
		res = append(res, line)
	}
	return strings.Join(res, "\n"), rows.Err()
}

type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
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
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: want version %d (no gaps or duplicates)", m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the highest migration this binary knows.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

func (s *SQLite) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return s.apply(ctx, ms)
}

// apply runs the migrations ms (numbered 1..n) the database lacks, each in
// its own transaction with its schema_migrations row: a migration that fails
// leaves nothing of itself behind.
func (s *SQLite) apply(ctx context.Context, ms []migration) error {
	if _, err := s.writer.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	known := len(ms)
	for _, m := range ms {
		err := s.tx(ctx, func(tx *sql.Tx) error {
			// Read the version inside the (immediate) transaction: another
			// process may have migrated since.
			var cur int
			if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
				return fmt.Errorf("read schema version: %w", err)
			}
			if cur > known {
				return fmt.Errorf("database schema version %d is newer than this sbx (knows up to %d): upgrade sbx", cur, known)
			}
			if cur >= m.version {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)",
				m.version, m.name, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return err
		}
	}
	if known == 0 {
		var cur int
		if err := s.writer.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
			return err
		}
		if cur > 0 {
			return fmt.Errorf("database schema version %d is newer than this sbx (knows up to 0)", cur)
		}
	}
	return nil
}

// tx runs fn in a write transaction (BEGIN IMMEDIATE) and commits if fn
// returns nil.
func (s *SQLite) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// The writer pool has one connection: a transaction left open by a
	// panic would block every later write, so roll back before re-panicking.
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
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
