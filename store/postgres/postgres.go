// Package postgres keeps sbx's state in PostgreSQL (pgx v5) behind the same
// interfaces store.SQLite implements (keys.Store, keys.WebStore, audit.Store,
// accounts.Store, fleet.Store), so several gateways can share one database.
// It adds what only a shared database needs: leases, so a lifecycle timer
// that fires on every gateway acts once (TryLease), and LISTEN/NOTIFY, so
// live events reach a client connected to any gateway (Notify, Listen).
//
// Migrations are the PostgreSQL dialect of store/migrations: the same
// numbers and names (a test keeps the two sets equal), applied under an
// advisory lock so gateways starting together migrate once.
//
// Writes run one at a time, each transaction holding one advisory lock:
// this is SQLite's single writer again, so the checks that guard invariants
// across rows (the last enabled admin, one default account) see every
// committed write. Reads never wait.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/keys"
)

// Store is the PostgreSQL store.
type Store struct {
	pool *pgxpool.Pool
	// leasePurge is when this Store last purged old leases (UnixNano).
	leasePurge atomic.Int64
}

var (
	_ keys.Store     = (*Store)(nil)
	_ keys.WebStore  = (*Store)(nil)
	_ audit.Store    = (*Store)(nil)
	_ accounts.Store = (*Store)(nil)
	_ fleet.Store    = (*Store)(nil)
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Advisory lock keys (pg_advisory_xact_lock takes a bigint).
const (
	lockMigrate int64 = 0x5b5_0001
	lockWrite   int64 = 0x5b5_0002
)

// bootstrap creates the tables outside the shared migration set: the
// migration ledger and the leases only a shared database needs.
const bootstrap = `
CREATE TABLE IF NOT EXISTS schema_migrations (
	version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS sbx_leases (
	name    TEXT        PRIMARY KEY,
	holder  TEXT        NOT NULL,
	expires TIMESTAMPTZ NOT NULL);`

// Open connects to the database at dsn (a postgres:// URL or key=value
// string) and applies pending migrations. It refuses a database written by a
// newer sbx.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", cfg.ConnConfig.Database, err)
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
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

func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Gateways starting together: one migrates, the others wait and
		// then find nothing to do.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockMigrate); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		if _, err := tx.Exec(ctx, bootstrap); err != nil {
			return fmt.Errorf("bootstrap tables: %w", err)
		}
		var cur int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		if cur > len(ms) {
			return fmt.Errorf("database schema version %d is newer than this sbx (knows up to %d): upgrade sbx", cur, len(ms))
		}
		for _, m := range ms[cur:] {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied) VALUES ($1, $2, $3)",
				m.version, m.name, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("record migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// tx runs fn in a write transaction holding the write lock and commits if
// fn returns nil.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockWrite); err != nil {
			return fmt.Errorf("take write lock: %w", err)
		}
		return fn(tx)
	})
}

// isUnique reports whether err is a unique violation.
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// isForeignKey reports whether err is a foreign key violation.
func isForeignKey(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

func nanos(t time.Time) int64 { return t.UnixNano() }

// nullNanos maps the zero time to NULL.
func nullNanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}
