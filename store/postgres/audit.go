package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"sbx.dev/sbx/audit"
)

// InsertAudit writes one audit row.
func (s *Store) InsertAudit(ctx context.Context, e audit.Entry) (int64, error) {
	return insertAuditRow(ctx, s.pool, e)
}

// insertAudit writes the audit row of a change inside the change's
// transaction.
func insertAudit(ctx context.Context, tx pgx.Tx, e audit.Entry) error {
	_, err := insertAuditRow(ctx, tx, e)
	return err
}

// auditIf writes rec within tx unless it is the zero Entry (bookkeeping
// that is no action of anyone's).
func auditIf(ctx context.Context, tx pgx.Tx, rec audit.Entry) error {
	if rec.Action == "" {
		return nil
	}
	return insertAudit(ctx, tx, rec)
}

func insertAuditRow(ctx context.Context, q db, e audit.Entry) (int64, error) {
	if e.Action == "" {
		return 0, fmt.Errorf("insert audit row: no action")
	}
	e = audit.Clean(e)
	if e.Result == "" {
		e.Result = audit.ResultOK
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO audit (time, actor, front, action, target, addr, result, detail)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`,
		nanos(e.Time), e.Actor, e.Front, e.Action, e.Target, e.Addr, e.Result, e.Detail).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert audit row %s: %w", e.Action, err)
	}
	return id, nil
}

// ListAudit returns rows matching f, newest first.
func (s *Store) ListAudit(ctx context.Context, f audit.Filter) ([]audit.Entry, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.User != "" {
		where = append(where, "actor = "+arg(f.User))
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= "+arg(nanos(f.Since)))
	}
	q := "SELECT id, time, actor, front, action, target, addr, result, detail FROM audit"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY time DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit rows: %w", err)
	}
	defer rows.Close()
	var out []audit.Entry
	for rows.Next() {
		var e audit.Entry
		var t int64
		if err := rows.Scan(&e.ID, &t, &e.Actor, &e.Front, &e.Action, &e.Target, &e.Addr, &e.Result, &e.Detail); err != nil {
			return nil, fmt.Errorf("list audit rows: %w", err)
		}
		e.Time = fromNanos(t)
		out = append(out, e)
	}
	return out, rows.Err()
}
