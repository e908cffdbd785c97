package store

import (
	"context"
	"fmt"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// Project profiles and per-repository defaults (fleet.ProfileStore), one
// set of queries for both dialects.

var _ fleet.ProfileStore = (*Store)(nil)

// ListProfiles returns owner's profiles and the site's, by scope and name.
func (s *Store) ListProfiles(ctx context.Context, owner string) ([]fleet.StoredProfile, error) {
	rows, err := s.read().query(ctx, `SELECT scope, owner, name, body, updated FROM profiles
		WHERE (scope = 'user' AND owner = ?) OR scope = 'site' ORDER BY scope DESC, name`, owner)
	if err != nil {
		return nil, fmt.Errorf("profiles of %q: %w", owner, err)
	}
	defer rows.Close()
	out := []fleet.StoredProfile{}
	for rows.Next() {
		var p fleet.StoredProfile
		var body string
		var updated int64
		if err := rows.Scan(&p.Scope, &p.Owner, &p.Name, &body, &updated); err != nil {
			return nil, fmt.Errorf("profiles of %q: %w", owner, err)
		}
		p.Body, p.Updated = []byte(body), fromNanos(updated)
		out = append(out, p)
	}
	return out, rows.Err()
}

// PutProfile creates or replaces a profile, with rec.
func (s *Store) PutProfile(ctx context.Context, p fleet.StoredProfile, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		_, err := tx.exec(ctx, `INSERT INTO profiles (scope, owner, name, body, updated) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (scope, owner, name) DO UPDATE SET body = excluded.body, updated = excluded.updated`,
			p.Scope, p.Owner, p.Name, string(p.Body), nanos(p.Updated))
		if err != nil {
			return fmt.Errorf("save profile %q: %w", p.Name, err)
		}
		return auditIf(ctx, tx, rec)
	})
}

// DeleteProfile removes a profile, and for a user's profile the owner's
// repository defaults that name it (no other profile of the name left to
// stand in), with rec; false when there was none.
func (s *Store) DeleteProfile(ctx context.Context, scope, owner, name string, rec audit.Entry) (bool, error) {
	found := false
	err := s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM profiles WHERE scope = ? AND owner = ? AND name = ?", scope, owner, name)
		if err != nil {
			return fmt.Errorf("delete profile %q: %w", name, err)
		}
		n, _ := res.RowsAffected()
		if found = n > 0; !found {
			return nil
		}
		if scope == fleet.ScopeUser {
			var site int
			if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM profiles WHERE scope = 'site' AND name = ?", name).Scan(&site); err != nil {
				return fmt.Errorf("delete profile %q: %w", name, err)
			}
			if site == 0 {
				if _, err := tx.exec(ctx, "DELETE FROM repo_profiles WHERE owner = ? AND profile = ?", owner, name); err != nil {
					return fmt.Errorf("delete profile %q: its repository defaults: %w", name, err)
				}
			}
		}
		return auditIf(ctx, tx, rec)
	})
	return found, err
}

// RepoProfiles returns owner's per-repository defaults, by repository.
func (s *Store) RepoProfiles(ctx context.Context, owner string) ([]fleet.RepoDefault, error) {
	rows, err := s.read().query(ctx, "SELECT repo, profile FROM repo_profiles WHERE owner = ? ORDER BY repo", owner)
	if err != nil {
		return nil, fmt.Errorf("repository profiles of %q: %w", owner, err)
	}
	defer rows.Close()
	out := []fleet.RepoDefault{}
	for rows.Next() {
		var d fleet.RepoDefault
		if err := rows.Scan(&d.Repo, &d.Profile); err != nil {
			return nil, fmt.Errorf("repository profiles of %q: %w", owner, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// SetRepoProfile sets owner's default profile for repo ("" clears it),
// with rec.
func (s *Store) SetRepoProfile(ctx context.Context, owner, repo, profile string, at time.Time, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		var err error
		if profile == "" {
			_, err = tx.exec(ctx, "DELETE FROM repo_profiles WHERE owner = ? AND repo = ?", owner, repo)
		} else {
			_, err = tx.exec(ctx, `INSERT INTO repo_profiles (owner, repo, profile, updated) VALUES (?, ?, ?, ?)
				ON CONFLICT (owner, repo) DO UPDATE SET profile = excluded.profile, updated = excluded.updated`,
				owner, repo, profile, nanos(at))
		}
		if err != nil {
			return fmt.Errorf("default profile of %s: %w", repo, err)
		}
		return auditIf(ctx, tx, rec)
	})
}
