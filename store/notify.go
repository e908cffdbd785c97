package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// Notification channels and their outbox (fleet.NotifyStore), one set of
// queries for both dialects.

var _ fleet.NotifyStore = (*Store)(nil)

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// unixOrZero reads a nanosecond column where 0 means none.
func unixOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func nanosOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// InsertChannel adds one of a user's notification channels.
func (s *Store) InsertChannel(ctx context.Context, d fleet.ChannelDoc, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, `INSERT INTO notify_channels (owner, name, kind, url_shown, sealed, events, digest, enabled, created)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			d.Owner, d.Name, d.Kind, d.URL, d.Sealed, strings.Join(d.Events, ","), boolInt(d.Digest), boolInt(d.Enabled), nanos(d.Created))
		if isUnique(err) {
			return fmt.Errorf("notification channel %q: already exists: %w", d.Name, fleet.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("insert notification channel %q: %w", d.Name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// ListChannels lists owner's channels by name ("": every owner's).
func (s *Store) ListChannels(ctx context.Context, owner string) ([]fleet.ChannelDoc, error) {
	q := "SELECT owner, name, kind, url_shown, sealed, events, digest, enabled, created FROM notify_channels"
	var args []any
	if owner != "" {
		q += " WHERE owner = ?"
		args = append(args, owner)
	}
	rows, err := s.read().query(ctx, q+" ORDER BY owner, name", args...)
	if err != nil {
		return nil, fmt.Errorf("notification channels of %q: %w", owner, err)
	}
	defer rows.Close()
	var out []fleet.ChannelDoc
	for rows.Next() {
		var d fleet.ChannelDoc
		var events string
		var digest, enabled, created int64
		if err := rows.Scan(&d.Owner, &d.Name, &d.Kind, &d.URL, &d.Sealed, &events, &digest, &enabled, &created); err != nil {
			return nil, fmt.Errorf("notification channels of %q: %w", owner, err)
		}
		if events != "" {
			d.Events = strings.Split(events, ",")
		}
		d.Digest, d.Enabled, d.Created = digest != 0, enabled != 0, time.Unix(0, created)
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeleteChannel removes a channel and its deliveries.
func (s *Store) DeleteChannel(ctx context.Context, owner, name string, rec audit.Entry) (bool, error) {
	found := false
	err := s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM notify_channels WHERE owner = ? AND name = ?", owner, name)
		if err != nil {
			return fmt.Errorf("remove notification channel %q: %w", name, err)
		}
		n, _ := res.RowsAffected()
		if found = n > 0; !found {
			return nil
		}
		if _, err := tx.exec(ctx, "DELETE FROM notify_deliveries WHERE owner = ? AND channel = ?", owner, name); err != nil {
			return fmt.Errorf("remove the deliveries of channel %q: %w", name, err)
		}
		return auditIf(ctx, tx, rec)
	})
	return found, err
}

// SetChannelEnabled turns a channel on or off.
func (s *Store) SetChannelEnabled(ctx context.Context, owner, name string, enabled bool, rec audit.Entry) (bool, error) {
	found := false
	err := s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "UPDATE notify_channels SET enabled = ? WHERE owner = ? AND name = ?", boolInt(enabled), owner, name)
		if err != nil {
			return fmt.Errorf("update notification channel %q: %w", name, err)
		}
		n, _ := res.RowsAffected()
		if found = n > 0; !found {
			return nil
		}
		return auditIf(ctx, tx, rec)
	})
	return found, err
}

const deliveryColumns = "id, owner, channel, key, event, box, payload, status, attempts, next_attempt, last_status, last_error, created, delivered"

func scanDelivery(rows interface{ Scan(...any) error }) (fleet.DeliveryDoc, error) {
	var d fleet.DeliveryDoc
	var payload string
	var next, created, delivered int64
	err := rows.Scan(&d.ID, &d.Owner, &d.Channel, &d.Key, &d.Event, &d.Box, &payload, &d.Status, &d.Attempts, &next,
		&d.LastStatus, &d.LastError, &created, &delivered)
	d.Payload = []byte(payload)
	d.NextAttempt, d.Created, d.Delivered = time.Unix(0, next), time.Unix(0, created), unixOrZero(delivered)
	return d, err
}

// EnqueueDelivery adds d unless its (owner, channel, key) is there.
func (s *Store) EnqueueDelivery(ctx context.Context, d *fleet.DeliveryDoc) (bool, error) {
	added := false
	err := s.update(ctx, func(tx conn) error {
		rows, err := tx.query(ctx, `INSERT INTO notify_deliveries (owner, channel, key, event, box, payload, status, attempts,
			next_attempt, last_status, last_error, created, delivered) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (owner, channel, key) DO NOTHING RETURNING id`,
			d.Owner, d.Channel, d.Key, d.Event, d.Box, string(d.Payload), d.Status, d.Attempts, nanos(d.NextAttempt),
			d.LastStatus, d.LastError, nanos(d.Created), nanosOrZero(d.Delivered))
		if err != nil {
			return fmt.Errorf("enqueue %s for channel %q: %w", d.Event, d.Channel, err)
		}
		defer rows.Close()
		if rows.Next() {
			added = true
			if err := rows.Scan(&d.ID); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return added, err
}

// DueDeliveries lists pending deliveries due at now, oldest first.
func (s *Store) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]fleet.DeliveryDoc, error) {
	return s.deliveries(ctx, "WHERE status = ? AND next_attempt <= ? ORDER BY next_attempt, id LIMIT ?", fleet.DeliveryPending, nanos(now), limit)
}

func (s *Store) deliveries(ctx context.Context, where string, args ...any) ([]fleet.DeliveryDoc, error) {
	rows, err := s.read().query(ctx, "SELECT "+deliveryColumns+" FROM notify_deliveries "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("notification deliveries: %w", err)
	}
	defer rows.Close()
	var out []fleet.DeliveryDoc
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("notification deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ClaimDelivery moves a pending delivery's next attempt from was to until
// if it is still was: the caller that moves it sends it.
func (s *Store) ClaimDelivery(ctx context.Context, id int64, was, until time.Time) (bool, error) {
	res, err := s.write().exec(ctx, "UPDATE notify_deliveries SET next_attempt = ? WHERE id = ? AND status = ? AND next_attempt = ?",
		nanos(until), id, fleet.DeliveryPending, nanos(was))
	if err != nil {
		return false, fmt.Errorf("claim delivery %d: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// FinishAttempt records an attempt's outcome.
func (s *Store) FinishAttempt(ctx context.Context, d fleet.DeliveryDoc) error {
	_, err := s.write().exec(ctx, `UPDATE notify_deliveries SET status = ?, attempts = ?, next_attempt = ?, last_status = ?,
		last_error = ?, delivered = ? WHERE id = ?`,
		d.Status, d.Attempts, nanos(d.NextAttempt), d.LastStatus, d.LastError, nanosOrZero(d.Delivered), d.ID)
	if err != nil {
		return fmt.Errorf("record delivery %d: %w", d.ID, err)
	}
	return nil
}

// ListDeliveries lists a channel's newest deliveries first.
func (s *Store) ListDeliveries(ctx context.Context, owner, channel string, limit int) ([]fleet.DeliveryDoc, error) {
	return s.deliveries(ctx, "WHERE owner = ? AND channel = ? ORDER BY id DESC LIMIT ?", owner, channel, limit)
}

// PruneDeliveries keeps a channel's newest keep finished deliveries (and
// every pending one).
func (s *Store) PruneDeliveries(ctx context.Context, owner, channel string, keep int) error {
	_, err := s.write().exec(ctx, `DELETE FROM notify_deliveries WHERE owner = ? AND channel = ? AND status <> ? AND id NOT IN (
		SELECT id FROM notify_deliveries WHERE owner = ? AND channel = ? AND status <> ? ORDER BY id DESC LIMIT ?)`,
		owner, channel, fleet.DeliveryPending, owner, channel, fleet.DeliveryPending, keep)
	if err != nil {
		return fmt.Errorf("prune the delivery log of %q: %w", channel, err)
	}
	return nil
}
