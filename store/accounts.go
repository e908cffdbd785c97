package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/keys"
)

// InsertAccount saves a GitHub account; the owner's first becomes default.
func (s *Store) InsertAccount(ctx context.Context, a accounts.Account, sealed []byte, rec audit.Entry) (accounts.Account, error) {
	err := s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, a.Owner)
		if err != nil {
			return err
		}
		var n int
		if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM github_accounts WHERE user_id = ?", u.ID).Scan(&n); err != nil {
			return fmt.Errorf("count accounts of %q: %w", a.Owner, err)
		}
		a.Default = n == 0
		id := a.Identity
		scopes := sql.NullString{String: strings.Join(id.Scopes, " "), Valid: id.HasScopes}
		_, err = tx.exec(ctx, `INSERT INTO github_accounts (user_id, name, host, masked, token, is_default, created, login, scopes, expires)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, u.ID, a.Name, a.Host, a.Masked, sealed, a.Default, nanos(a.Created),
			id.Login, scopes, nullNanos(id.Expires))
		if isUnique(err) {
			return fmt.Errorf("GitHub account %q of %q: %w", a.Name, a.Owner, keys.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("insert GitHub account %q of %q: %w", a.Name, a.Owner, err)
		}
		return insertAudit(ctx, tx, rec)
	})
	if err != nil {
		return accounts.Account{}, err
	}
	return a, nil
}

// accountID finds one account of user within tx.
func accountID(ctx context.Context, tx conn, userID int64, owner, name string) (int64, error) {
	var id int64
	err := tx.queryRow(ctx, "SELECT id FROM github_accounts WHERE user_id = ? AND name = ?", userID, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("GitHub account %q of %q: %w", name, owner, keys.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("look up GitHub account %q of %q: %w", name, owner, err)
	}
	return id, nil
}

// DeleteAccount removes one account of owner.
func (s *Store) DeleteAccount(ctx context.Context, owner, name string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, owner)
		if err != nil {
			return err
		}
		id, err := accountID(ctx, tx, u.ID, owner, name)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "DELETE FROM github_accounts WHERE id = ?", id); err != nil {
			return fmt.Errorf("delete GitHub account %q of %q: %w", name, owner, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// SetDefaultAccount makes name the only default account of owner.
func (s *Store) SetDefaultAccount(ctx context.Context, owner, name string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, owner)
		if err != nil {
			return err
		}
		id, err := accountID(ctx, tx, u.ID, owner, name)
		if err != nil {
			return err
		}
		// Clear first: the partial unique index allows one default per user.
		if _, err := tx.exec(ctx, "UPDATE github_accounts SET is_default = FALSE WHERE user_id = ? AND is_default", u.ID); err != nil {
			return fmt.Errorf("clear default GitHub account of %q: %w", owner, err)
		}
		if _, err := tx.exec(ctx, "UPDATE github_accounts SET is_default = TRUE WHERE id = ?", id); err != nil {
			return fmt.Errorf("set default GitHub account %q of %q: %w", name, owner, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// ListAccounts returns owner's accounts with their sealed tokens, the
// default first, then by name.
func (s *Store) ListAccounts(ctx context.Context, owner string) ([]accounts.Record, error) {
	u, err := getUser(ctx, s.read(), owner)
	if err != nil {
		return nil, err
	}
	rows, err := s.read().query(ctx, `SELECT name, host, masked, token, is_default, created, login, scopes, expires
		FROM github_accounts WHERE user_id = ? ORDER BY is_default DESC, name`, u.ID)
	if err != nil {
		return nil, fmt.Errorf("list GitHub accounts of %q: %w", owner, err)
	}
	defer rows.Close()
	var out []accounts.Record
	for rows.Next() {
		r := accounts.Record{OwnerID: u.ID}
		r.Owner = u.Name
		var created int64
		var scopes sql.NullString
		var expires sql.NullInt64
		if err := rows.Scan(&r.Name, &r.Host, &r.Masked, &r.Sealed, &r.Default, &created, &r.Identity.Login, &scopes, &expires); err != nil {
			return nil, fmt.Errorf("list GitHub accounts of %q: %w", owner, err)
		}
		r.Created = fromNanos(created)
		r.Identity.Scopes, r.Identity.HasScopes = strings.Fields(scopes.String), scopes.Valid
		r.Identity.Expires = fromNullNanos(expires)
		out = append(out, r)
	}
	return out, rows.Err()
}
