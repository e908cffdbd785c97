package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// TryLease takes or renews the lease name for holder until ttl from now
// and reports whether holder has it. A lease held by another holder is
// taken only once it has expired. Times are the database's clock, so the
// gateways' clocks need not agree.
//
// A lifecycle timer that fires on every gateway acts once: each calls
// TryLease(ctx, "box/<name>/max-duration", gatewayID, ttl) and only the one
// that gets true acts.
func (s *Store) TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if name == "" || holder == "" || ttl <= 0 {
		return false, fmt.Errorf("lease %q for %q: want a name, a holder and a positive ttl", name, holder)
	}
	s.purgeLeases(ctx)
	var got string
	err := s.pool.QueryRow(ctx, `INSERT INTO sbx_leases (name, holder, expires)
		VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
		WHERE sbx_leases.expires <= clock_timestamp() OR sbx_leases.holder = excluded.holder
		RETURNING holder`, name, holder, ttl.Microseconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // held by another, unexpired
	}
	if err != nil {
		return false, fmt.Errorf("lease %q for %q: %w", name, holder, err)
	}
	return got == holder, nil
}

// Leases are named per firing of a timer ("box/B/idle-sleep/<time>"), so
// the table only grows: every purgeEvery a gateway deletes the leases that
// expired more than purgeAfter ago (long after anyone could still compare
// against them).
const (
	purgeEvery = 10 * time.Minute
	purgeAfter = time.Hour
)

func (s *Store) purgeLeases(ctx context.Context) {
	last := s.leasePurge.Load()
	now := time.Now().UnixNano()
	if now-last < int64(purgeEvery) || !s.leasePurge.CompareAndSwap(last, now) {
		return
	}
	if _, err := s.pool.Exec(ctx, "DELETE FROM sbx_leases WHERE expires < clock_timestamp() - $1 * interval '1 microsecond'",
		purgeAfter.Microseconds()); err != nil {
		slog.Warn("purge expired leases", "err", err)
	}
}

// ReleaseLease gives up name if holder has it (no error when it does not).
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := s.pool.Exec(ctx, "DELETE FROM sbx_leases WHERE name = $1 AND holder = $2", name, holder); err != nil {
		return fmt.Errorf("release lease %q of %q: %w", name, holder, err)
	}
	return nil
}
