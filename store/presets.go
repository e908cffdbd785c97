package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// Users' default egress presets (fleet.PresetStore), one set of queries for
// both dialects.

var _ fleet.PresetStore = (*Store)(nil)

// DefaultPresets returns owner's default presets; none without a row.
func (s *Store) DefaultPresets(ctx context.Context, owner string) ([]string, error) {
	var list string
	err := s.read().queryRow(ctx, "SELECT presets FROM user_presets WHERE owner = ?", owner).Scan(&list)
	if errors.Is(err, sql.ErrNoRows) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("default presets of %q: %w", owner, err)
	}
	return strings.Fields(list), nil
}

// SetDefaultPresets replaces owner's default presets, with rec.
func (s *Store) SetDefaultPresets(ctx context.Context, owner string, presets []string, at time.Time, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, `INSERT INTO user_presets (owner, presets, updated) VALUES (?, ?, ?)
			ON CONFLICT (owner) DO UPDATE SET presets = excluded.presets, updated = excluded.updated`,
			owner, strings.Join(presets, " "), nanos(at))
		if err != nil {
			return fmt.Errorf("set default presets of %q: %w", owner, err)
		}
		return auditIf(ctx, tx, rec)
	})
}
