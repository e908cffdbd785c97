package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// Internal package mirrors admins add (fleet.MirrorStore), one set of
// queries for both dialects.

var _ fleet.MirrorStore = (*Store)(nil)

// Mirrors lists the stored mirrors by name.
func (s *Store) Mirrors(ctx context.Context) ([]fleet.MirrorInfo, error) {
	rows, err := s.read().query(ctx, "SELECT name, host, ranges, added_by, created FROM net_mirrors ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list mirrors: %w", err)
	}
	defer rows.Close()
	out := []fleet.MirrorInfo{}
	for rows.Next() {
		var m fleet.MirrorInfo
		var ranges string
		var created int64
		if err := rows.Scan(&m.Name, &m.Host, &ranges, &m.AddedBy, &created); err != nil {
			return nil, fmt.Errorf("list mirrors: %w", err)
		}
		m.Ranges, m.Source, m.Created = strings.Fields(ranges), fleet.MirrorFromAdmin, time.Unix(0, created).UTC()
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list mirrors: %w", err)
	}
	return out, nil
}

// AddMirror adds a mirror, with rec; fleet.ErrConflict when the name is
// taken.
func (s *Store) AddMirror(ctx context.Context, m fleet.MirrorInfo, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, "INSERT INTO net_mirrors (name, host, ranges, added_by, created) VALUES (?, ?, ?, ?, ?)",
			m.Name, m.Host, strings.Join(m.Ranges, " "), m.AddedBy, nanos(m.Created))
		if isUnique(err) {
			return fmt.Errorf("mirror %q: %w", m.Name, fleet.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("add mirror %q: %w", m.Name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// RemoveMirror removes a mirror, with rec; fleet.ErrNotFound when there is
// none of that name.
func (s *Store) RemoveMirror(ctx context.Context, name string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM net_mirrors WHERE name = ?", name)
		if err != nil {
			return fmt.Errorf("remove mirror %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("mirror %q: %w", name, fleet.ErrNotFound)
		}
		return auditIf(ctx, tx, rec)
	})
}
