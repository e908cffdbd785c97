package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
)

// InsertAudit writes one audit row.
func (s *Store) InsertAudit(ctx context.Context, e audit.Entry) (int64, error) {
	return insertAuditRow(ctx, s.write(), e)
}

// insertAudit writes the audit row of a change inside the change's
// transaction.
func insertAudit(ctx context.Context, tx conn, e audit.Entry) error {
	_, err := insertAuditRow(ctx, tx, e)
	return err
}

func insertAuditRow(ctx context.Context, db conn, e audit.Entry) (int64, error) {
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
	err := db.queryRow(ctx, `INSERT INTO audit (time, actor, front, action, target, addr, result, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
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
	if f.User != "" {
		where = append(where, "actor = ?")
		args = append(args, f.User)
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, nanos(f.Since))
	}
	q := "SELECT id, time, actor, front, action, target, addr, result, detail FROM audit"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY time DESC, id DESC"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.read().query(ctx, q, args...)
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
