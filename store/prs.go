package store

import (
	"context"
	"fmt"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// The rows of boxes' pull requests (fleet/prs.go, table box_prs).

const prColumns = "box, owner, repo, number, account, url, base, head, head_sha, state, checks, card, updated"

// PutPR saves a box's pull request: a new row, or the same box, repo and
// number's row replaced.
func (s *Store) PutPR(ctx context.Context, d fleet.PRDoc, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, "INSERT INTO box_prs ("+prColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"+
			" ON CONFLICT (box, repo, number) DO UPDATE SET owner = excluded.owner, account = excluded.account,"+
			" url = excluded.url, base = excluded.base, head = excluded.head, head_sha = excluded.head_sha,"+
			" state = excluded.state, checks = excluded.checks, card = excluded.card, updated = excluded.updated",
			d.Box, d.Owner, d.Repo, d.Number, d.Account, d.URL, d.Base, d.Head, d.HeadSHA, d.State, d.Checks, string(d.Card), nanos(d.Updated))
		if isForeignKey(err) {
			return fmt.Errorf("pull request %s#%d of box %q: %w", d.Repo, d.Number, d.Box, fleet.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("save pull request %s#%d of box %q: %w", d.Repo, d.Number, d.Box, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// ListPRs returns a box's pull requests, the newest first.
func (s *Store) ListPRs(ctx context.Context, box string) ([]fleet.PRDoc, error) {
	return s.prs(ctx, "SELECT "+prColumns+" FROM box_prs WHERE box = ? ORDER BY number DESC, repo", box)
}

// OpenPRs returns every pull request last seen open.
func (s *Store) OpenPRs(ctx context.Context) ([]fleet.PRDoc, error) {
	return s.prs(ctx, "SELECT "+prColumns+" FROM box_prs WHERE state = ? ORDER BY box, repo, number", "open")
}

// MergedPRs returns owner's pull requests seen merged since then, newest
// first.
func (s *Store) MergedPRs(ctx context.Context, owner string, since time.Time) ([]fleet.PRDoc, error) {
	return s.prs(ctx, "SELECT "+prColumns+" FROM box_prs WHERE owner = ? AND state = ? AND updated >= ? ORDER BY updated DESC", owner, "merged", nanos(since))
}

func (s *Store) prs(ctx context.Context, q string, args ...any) ([]fleet.PRDoc, error) {
	rows, err := s.read().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pull requests: %w", err)
	}
	defer rows.Close()
	var out []fleet.PRDoc
	for rows.Next() {
		var d fleet.PRDoc
		var number, updated int64
		var card string
		if err := rows.Scan(&d.Box, &d.Owner, &d.Repo, &number, &d.Account, &d.URL, &d.Base, &d.Head, &d.HeadSHA,
			&d.State, &d.Checks, &card, &updated); err != nil {
			return nil, fmt.Errorf("pull requests: %w", err)
		}
		d.Number, d.Card, d.Updated = int(number), []byte(card), time.Unix(0, updated)
		out = append(out, d)
	}
	return out, rows.Err()
}
