package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// auditIf writes rec within tx unless it is the zero Entry (bookkeeping
// that is no action of anyone's).
func auditIf(ctx context.Context, tx conn, rec audit.Entry) error {
	if rec.Action == "" {
		return nil
	}
	return insertAudit(ctx, tx, rec)
}

// InsertBox adds a box.
func (s *Store) InsertBox(ctx context.Context, b fleet.BoxDoc, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		now := nanos(time.Now())
		_, err := tx.exec(ctx, "INSERT INTO boxes (name, owner, state, title, doc, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
			b.Name, b.Owner, b.State, b.Title, string(b.Doc), now, now)
		if isUnique(err) {
			return fmt.Errorf("box %q: %w", b.Name, fleet.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("insert box %q: %w", b.Name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// UpdateBox replaces a box's document.
func (s *Store) UpdateBox(ctx context.Context, b fleet.BoxDoc, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "UPDATE boxes SET owner = ?, state = ?, title = ?, doc = ?, updated = ? WHERE name = ?",
			b.Owner, b.State, b.Title, string(b.Doc), nanos(time.Now()), b.Name)
		if err != nil {
			return fmt.Errorf("update box %q: %w", b.Name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("box %q: %w", b.Name, fleet.ErrNotFound)
		}
		return auditIf(ctx, tx, rec)
	})
}

// DeleteBox removes a box and its inbox.
func (s *Store) DeleteBox(ctx context.Context, name string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		if _, err := tx.exec(ctx, "DELETE FROM boxes WHERE name = ?", name); err != nil {
			return fmt.Errorf("delete box %q: %w", name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// GetBox returns one box.
func (s *Store) GetBox(ctx context.Context, name string) (fleet.BoxDoc, error) {
	var b fleet.BoxDoc
	var d string
	err := s.read().queryRow(ctx, "SELECT name, owner, state, title, doc FROM boxes WHERE name = ?", name).Scan(&b.Name, &b.Owner, &b.State, &b.Title, &d)
	if errors.Is(err, sql.ErrNoRows) {
		return b, fmt.Errorf("box %q: %w", name, fleet.ErrNotFound)
	}
	if err != nil {
		return b, fmt.Errorf("get box %q: %w", name, err)
	}
	b.Doc = []byte(d)
	return b, nil
}

// ListBoxes returns every box, oldest first.
func (s *Store) ListBoxes(ctx context.Context) ([]fleet.BoxDoc, error) {
	rows, err := s.read().query(ctx, "SELECT name, owner, state, title, doc FROM boxes ORDER BY created, name")
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	defer rows.Close()
	var out []fleet.BoxDoc
	for rows.Next() {
		var b fleet.BoxDoc
		var d string
		if err := rows.Scan(&b.Name, &b.Owner, &b.State, &b.Title, &d); err != nil {
			return nil, fmt.Errorf("list boxes: %w", err)
		}
		b.Doc = []byte(d)
		out = append(out, b)
	}
	return out, rows.Err()
}

// AddInbox queues a follow-up for a box.
func (s *Store) AddInbox(ctx context.Context, box, by, text string, at time.Time, rec audit.Entry) (int64, error) {
	var id int64
	err := s.update(ctx, func(tx conn) error {
		err := tx.queryRow(ctx, "INSERT INTO box_inbox (box, by, text, at) VALUES (?, ?, ?, ?) RETURNING id", box, by, text, nanos(at)).Scan(&id)
		if isForeignKey(err) {
			return fmt.Errorf("queue follow-up for box %q: %w", box, fleet.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("queue follow-up for box %q: %w", box, err)
		}
		return auditIf(ctx, tx, rec)
	})
	return id, err
}

// ListInbox returns a box's queued follow-ups, oldest first.
func (s *Store) ListInbox(ctx context.Context, box string) ([]fleet.InboxDoc, error) {
	rows, err := s.read().query(ctx, "SELECT id, box, by, text, at FROM box_inbox WHERE box = ? ORDER BY id", box)
	if err != nil {
		return nil, fmt.Errorf("inbox of box %q: %w", box, err)
	}
	defer rows.Close()
	var out []fleet.InboxDoc
	for rows.Next() {
		var d fleet.InboxDoc
		var at int64
		if err := rows.Scan(&d.ID, &d.Box, &d.By, &d.Text, &at); err != nil {
			return nil, fmt.Errorf("inbox of box %q: %w", box, err)
		}
		d.At = time.Unix(0, at)
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeleteInbox removes one queued follow-up.
func (s *Store) DeleteInbox(ctx context.Context, box string, id int64, rec audit.Entry) (bool, error) {
	found := false
	err := s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM box_inbox WHERE box = ? AND id = ?", box, id)
		if err != nil {
			return fmt.Errorf("remove inbox item %d of box %q: %w", id, box, err)
		}
		n, _ := res.RowsAffected()
		if found = n > 0; !found {
			return nil
		}
		return auditIf(ctx, tx, rec)
	})
	return found, err
}

// InsertMCPServer adds one of a user's MCP servers.
func (s *Store) InsertMCPServer(ctx context.Context, d fleet.MCPServerDoc, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, "INSERT INTO mcp_servers (owner, name, url, headers, created) VALUES (?, ?, ?, ?, ?)",
			d.Owner, d.Name, d.URL, d.Headers, nanos(d.Created))
		if isUnique(err) {
			return fmt.Errorf("MCP server %q: %w", d.Name, fleet.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("insert MCP server %q: %w", d.Name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// ListMCPServers returns a user's MCP servers by name.
func (s *Store) ListMCPServers(ctx context.Context, owner string) ([]fleet.MCPServerDoc, error) {
	rows, err := s.read().query(ctx, "SELECT owner, name, url, headers, created FROM mcp_servers WHERE owner = ? ORDER BY name", owner)
	if err != nil {
		return nil, fmt.Errorf("MCP servers of %q: %w", owner, err)
	}
	defer rows.Close()
	var out []fleet.MCPServerDoc
	for rows.Next() {
		var d fleet.MCPServerDoc
		var created int64
		if err := rows.Scan(&d.Owner, &d.Name, &d.URL, &d.Headers, &created); err != nil {
			return nil, fmt.Errorf("MCP servers of %q: %w", owner, err)
		}
		d.Created = time.Unix(0, created)
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeleteMCPServer removes one of a user's MCP servers.
func (s *Store) DeleteMCPServer(ctx context.Context, owner, name string, rec audit.Entry) (bool, error) {
	found := false
	err := s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM mcp_servers WHERE owner = ? AND name = ?", owner, name)
		if err != nil {
			return fmt.Errorf("remove MCP server %q: %w", name, err)
		}
		n, _ := res.RowsAffected()
		if found = n > 0; !found {
			return nil
		}
		return auditIf(ctx, tx, rec)
	})
	return found, err
}
