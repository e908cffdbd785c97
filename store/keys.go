package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

const userCols = "id, name, role, disabled, created"

type scanner interface{ Scan(...any) error }

func scanUser(r scanner) (keys.User, error) {
	var u keys.User
	var role string
	var created int64
	if err := r.Scan(&u.ID, &u.Name, &role, &u.Disabled, &created); err != nil {
		return keys.User{}, err
	}
	u.Role = keys.Role(role)
	u.Created = fromNanos(created)
	return u, nil
}

func getUser(ctx context.Context, q conn, name string) (keys.User, error) {
	u, err := scanUser(q.queryRow(ctx, "SELECT "+userCols+" FROM users WHERE name = ?", name))
	if errors.Is(err, sql.ErrNoRows) {
		return keys.User{}, fmt.Errorf("user %q: %w", name, keys.ErrNotFound)
	}
	if err != nil {
		return keys.User{}, fmt.Errorf("get user %q: %w", name, err)
	}
	return u, nil
}

func countEnabledAdmins(ctx context.Context, q conn) (int, error) {
	var n int
	if err := q.queryRow(ctx, "SELECT COUNT(*) FROM users WHERE role = 'admin' AND NOT disabled").Scan(&n); err != nil {
		return 0, fmt.Errorf("count enabled admins: %w", err)
	}
	return n, nil
}

// isLastAdmin reports whether u is the only enabled admin.
func isLastAdmin(ctx context.Context, q conn, u keys.User) (bool, error) {
	if u.Role != keys.RoleAdmin || u.Disabled {
		return false, nil
	}
	n, err := countEnabledAdmins(ctx, q)
	return n <= 1, err
}

func insertKeys(ctx context.Context, tx conn, userID int64, ks []keys.Key) error {
	for _, k := range ks {
		var owner string
		err := tx.queryRow(ctx, "SELECT u.name FROM ssh_keys k JOIN users u ON u.id = k.user_id WHERE k.fingerprint = ?",
			k.Fingerprint).Scan(&owner)
		if err == nil {
			return fmt.Errorf("key %s is already registered: %w", k.Fingerprint, keys.ErrExists)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("look up key %s: %w", k.Fingerprint, err)
		}
		if k.PublicKey == nil {
			return fmt.Errorf("key %s: no public key: %w", k.Fingerprint, keys.ErrInvalid)
		}
		line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.PublicKey)))
		_, err = tx.exec(ctx, `INSERT INTO ssh_keys (user_id, fingerprint, type, public_key, comment, created)
			VALUES (?, ?, ?, ?, ?, ?)`, userID, k.Fingerprint, k.Type, line, k.Comment, nanos(k.Created))
		if isUnique(err) {
			return fmt.Errorf("key %s is already registered: %w", k.Fingerprint, keys.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("insert key %s: %w", k.Fingerprint, err)
		}
	}
	return nil
}

// CreateUser inserts u and its keys in one transaction.
func (s *Store) CreateUser(ctx context.Context, u keys.User, ks []keys.Key, rec audit.Entry) (keys.User, error) {
	err := s.update(ctx, func(tx conn) error {
		err := tx.queryRow(ctx, "INSERT INTO users (name, role, disabled, created) VALUES (?, ?, ?, ?) RETURNING id",
			u.Name, string(u.Role), u.Disabled, nanos(u.Created)).Scan(&u.ID)
		if isUnique(err) {
			return fmt.Errorf("user %q: %w", u.Name, keys.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("insert user %q: %w", u.Name, err)
		}
		if err := insertKeys(ctx, tx, u.ID, ks); err != nil {
			return err
		}
		return insertAudit(ctx, tx, rec)
	})
	if err != nil {
		return keys.User{}, err
	}
	return u, nil
}

// DeleteUser removes a user; its SSH and API keys go with it (ON DELETE
// CASCADE). Audit rows keep the name.
func (s *Store) DeleteUser(ctx context.Context, name string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, name)
		if err != nil {
			return err
		}
		last, err := isLastAdmin(ctx, tx, u)
		if err != nil {
			return err
		}
		if last {
			return fmt.Errorf("remove user %q: %w", name, keys.ErrLastAdmin)
		}
		if _, err := tx.exec(ctx, "DELETE FROM users WHERE id = ?", u.ID); err != nil {
			return fmt.Errorf("delete user %q: %w", name, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// SetUserDisabled disables or enables a user.
func (s *Store) SetUserDisabled(ctx context.Context, name string, disabled bool, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, name)
		if err != nil {
			return err
		}
		if disabled {
			last, err := isLastAdmin(ctx, tx, u)
			if err != nil {
				return err
			}
			if last {
				return fmt.Errorf("disable user %q: %w", name, keys.ErrLastAdmin)
			}
		}
		if _, err := tx.exec(ctx, "UPDATE users SET disabled = ? WHERE id = ?", disabled, u.ID); err != nil {
			return fmt.Errorf("update user %q: %w", name, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// GetUser returns a user by name.
func (s *Store) GetUser(ctx context.Context, name string) (keys.User, error) {
	return getUser(ctx, s.read(), name)
}

// ListUsers returns every user ordered by name.
func (s *Store) ListUsers(ctx context.Context) ([]keys.User, error) {
	rows, err := s.read().query(ctx, "SELECT "+userCols+" FROM users ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	defer rows.Close()
	var out []keys.User
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// CountEnabledAdmins counts admins that are not disabled.
func (s *Store) CountEnabledAdmins(ctx context.Context) (int, error) {
	return countEnabledAdmins(ctx, s.read())
}

// AddKeys adds keys to user, all or none.
func (s *Store) AddKeys(ctx context.Context, user string, ks []keys.Key, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, user)
		if err != nil {
			return err
		}
		if err := insertKeys(ctx, tx, u.ID, ks); err != nil {
			return err
		}
		return insertAudit(ctx, tx, rec)
	})
}

// DeleteKey removes one key of user, refusing the last key of the last
// enabled admin.
func (s *Store) DeleteKey(ctx context.Context, user, fingerprint string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, user)
		if err != nil {
			return err
		}
		var id int64
		err = tx.queryRow(ctx, "SELECT id FROM ssh_keys WHERE user_id = ? AND fingerprint = ?", u.ID, fingerprint).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("key %s of user %q: %w", fingerprint, user, keys.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("look up key %s: %w", fingerprint, err)
		}
		last, err := isLastAdmin(ctx, tx, u)
		if err != nil {
			return err
		}
		if last {
			var n int
			if err := tx.queryRow(ctx, "SELECT COUNT(*) FROM ssh_keys WHERE user_id = ?", u.ID).Scan(&n); err != nil {
				return fmt.Errorf("count keys of %q: %w", user, err)
			}
			if n <= 1 {
				return fmt.Errorf("remove the last key of %q: %w", user, keys.ErrLastAdmin)
			}
		}
		if _, err := tx.exec(ctx, "DELETE FROM ssh_keys WHERE id = ?", id); err != nil {
			return fmt.Errorf("delete key %s: %w", fingerprint, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

const keyCols = "u.name, k.fingerprint, k.type, k.public_key, k.comment, k.created"

func scanKey(r scanner) (keys.Key, error) {
	var k keys.Key
	var line string
	var created int64
	if err := r.Scan(&k.User, &k.Fingerprint, &k.Type, &line, &k.Comment, &created); err != nil {
		return keys.Key{}, err
	}
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return keys.Key{}, fmt.Errorf("stored key %s is corrupt: %w", k.Fingerprint, err)
	}
	k.PublicKey = pk
	k.Created = fromNanos(created)
	return k, nil
}

// ListKeys returns user's SSH keys, oldest first.
func (s *Store) ListKeys(ctx context.Context, user string) ([]keys.Key, error) {
	u, err := getUser(ctx, s.read(), user)
	if err != nil {
		return nil, err
	}
	rows, err := s.read().query(ctx, "SELECT "+keyCols+" FROM ssh_keys k JOIN users u ON u.id = k.user_id WHERE k.user_id = ? ORDER BY k.id", u.ID)
	if err != nil {
		return nil, fmt.Errorf("list keys of %q: %w", user, err)
	}
	defer rows.Close()
	var out []keys.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys of %q: %w", user, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// KeyByFingerprint returns the key with fingerprint and its owner.
func (s *Store) KeyByFingerprint(ctx context.Context, fingerprint string) (keys.Key, keys.User, error) {
	row := s.read().queryRow(ctx, "SELECT "+keyCols+", u.id, u.name, u.role, u.disabled, u.created FROM ssh_keys k JOIN users u ON u.id = k.user_id WHERE k.fingerprint = ?", fingerprint)
	var k keys.Key
	var line, role string
	var kc, uc int64
	var u keys.User
	err := row.Scan(&k.User, &k.Fingerprint, &k.Type, &line, &k.Comment, &kc, &u.ID, &u.Name, &role, &u.Disabled, &uc)
	if errors.Is(err, sql.ErrNoRows) {
		return keys.Key{}, keys.User{}, fmt.Errorf("key %s: %w", fingerprint, keys.ErrNotFound)
	}
	if err != nil {
		return keys.Key{}, keys.User{}, fmt.Errorf("look up key %s: %w", fingerprint, err)
	}
	pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return keys.Key{}, keys.User{}, fmt.Errorf("stored key %s is corrupt: %w", fingerprint, err)
	}
	k.PublicKey, k.Created = pk, fromNanos(kc)
	u.Role, u.Created = keys.Role(role), fromNanos(uc)
	return k, u, nil
}

// CreateAPIKey stores an API key with the SHA-256 of its token.
func (s *Store) CreateAPIKey(ctx context.Context, k keys.APIKey, hash []byte, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, k.User)
		if err != nil {
			return err
		}
		_, err = tx.exec(ctx, `INSERT INTO api_keys (id, user_id, name, hash, scopes, created, expires)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, k.ID, u.ID, k.Name, hash, strings.Join(k.Scopes, " "),
			nanos(k.Created), nullNanos(k.Expires))
		if isUnique(err) {
			return fmt.Errorf("api key id %s: %w", k.ID, keys.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("insert api key %s: %w", k.ID, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

const apiKeyCols = "a.id, u.name, a.name, a.scopes, a.created, a.expires, a.revoked, a.last_used"

func scanAPIKey(r scanner, extra ...any) (keys.APIKey, error) {
	var k keys.APIKey
	var scopes string
	var created int64
	var expires, revoked, lastUsed sql.NullInt64
	dest := append([]any{&k.ID, &k.User, &k.Name, &scopes, &created, &expires, &revoked, &lastUsed}, extra...)
	if err := r.Scan(dest...); err != nil {
		return keys.APIKey{}, err
	}
	k.Scopes = strings.Fields(scopes)
	k.Created = fromNanos(created)
	k.Expires, k.Revoked, k.LastUsed = fromNullNanos(expires), fromNullNanos(revoked), fromNullNanos(lastUsed)
	return k, nil
}

// APIKeyByID returns an API key, its token hash and its owner.
func (s *Store) APIKeyByID(ctx context.Context, id string) (keys.APIKey, []byte, keys.User, error) {
	row := s.read().queryRow(ctx, "SELECT "+apiKeyCols+", a.hash, u.id, u.name, u.role, u.disabled, u.created FROM api_keys a JOIN users u ON u.id = a.user_id WHERE a.id = ?", id)
	var hash []byte
	var u keys.User
	var role string
	var uc int64
	k, err := scanAPIKey(row, &hash, &u.ID, &u.Name, &role, &u.Disabled, &uc)
	if errors.Is(err, sql.ErrNoRows) {
		return keys.APIKey{}, nil, keys.User{}, fmt.Errorf("api key %s: %w", id, keys.ErrNotFound)
	}
	if err != nil {
		return keys.APIKey{}, nil, keys.User{}, fmt.Errorf("look up api key %s: %w", id, err)
	}
	u.Role, u.Created = keys.Role(role), fromNanos(uc)
	return k, hash, u, nil
}

// ListAPIKeys returns user's API keys, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, user string) ([]keys.APIKey, error) {
	u, err := getUser(ctx, s.read(), user)
	if err != nil {
		return nil, err
	}
	rows, err := s.read().query(ctx, "SELECT "+apiKeyCols+" FROM api_keys a JOIN users u ON u.id = a.user_id WHERE a.user_id = ? ORDER BY a.created, a.id", u.ID)
	if err != nil {
		return nil, fmt.Errorf("list api keys of %q: %w", user, err)
	}
	defer rows.Close()
	var out []keys.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys of %q: %w", user, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeAPIKey marks user's API key id revoked at at. Revoking twice keeps the
// first time.
func (s *Store) RevokeAPIKey(ctx context.Context, user, id string, at time.Time, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, user)
		if err != nil {
			return err
		}
		res, err := tx.exec(ctx, "UPDATE api_keys SET revoked = COALESCE(revoked, ?) WHERE id = ? AND user_id = ?", nanos(at), id, u.ID)
		if err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("api key %s of user %q: %w", id, user, keys.ErrNotFound)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// TouchAPIKey records a use of API key id.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	if _, err := s.write().exec(ctx, "UPDATE api_keys SET last_used = ? WHERE id = ?", nanos(at), id); err != nil {
		return fmt.Errorf("touch api key %s: %w", id, err)
	}
	return nil
}
