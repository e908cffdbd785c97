// Package postgres is the store (store.Store) on a PostgreSQL database that
// several gateways share. It adds what only a shared database needs: leases,
// so a lifecycle timer that fires on every gateway acts once (TryLease), and
// LISTEN/NOTIFY, so live events reach a client connected to any gateway
// (Notify, Listen).
//
// The queries and the migrations (store/migrations/postgres) are the
// store's; they run over pgx's database/sql driver on the pool that leases
// and LISTEN use too.
package postgres

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"sbx.dev/sbx/store"
)

// Store is the PostgreSQL store: the shared store.Store plus leases and
// LISTEN/NOTIFY.
type Store struct {
	*store.Store
	pool *pgxpool.Pool
	// leasePurge is when this Store last purged old leases (UnixNano).
	leasePurge atomic.Int64
}

// lockLeases serialises creating the leases table (pg_advisory_xact_lock
// takes a bigint; the store's own locks are 0x5b5_0001 and 0x5b5_0002).
const lockLeases int64 = 0x5b5_0003

// leasesTable is outside the store's migrations: only a shared database
// has leases.
const leasesTable = `CREATE TABLE IF NOT EXISTS sbx_leases (
	name    TEXT        PRIMARY KEY,
	holder  TEXT        NOT NULL,
	expires TIMESTAMPTZ NOT NULL)`

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
	st, err := store.OpenPostgres(ctx, stdlib.OpenDBFromPool(pool))
	if err == nil {
		err = createLeases(ctx, pool)
		if err != nil {
			st.Close()
		}
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", cfg.ConnConfig.Database, err)
	}
	return &Store{Store: st, pool: pool}, nil
}

// createLeases creates the leases table under a lock: gateways starting
// together would otherwise race on CREATE TABLE IF NOT EXISTS.
func createLeases(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockLeases); err != nil {
			return fmt.Errorf("lock leases table: %w", err)
		}
		if _, err := tx.Exec(ctx, leasesTable); err != nil {
			return fmt.Errorf("create leases table: %w", err)
		}
		return nil
	})
}

// Close closes the store and its pool.
func (s *Store) Close() error {
	err := s.Store.Close()
	s.pool.Close()
	return err
}
