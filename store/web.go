package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// CreateLoginLink stores a one-time login link's hash for user.
func (s *Store) CreateLoginLink(ctx context.Context, user string, hash []byte, created, expires time.Time, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, user)
		if err != nil {
			return err
		}
		// Spent and expired links are worthless; drop them as new ones come.
		if _, err := tx.exec(ctx, "DELETE FROM login_links WHERE expires <= ? OR used IS NOT NULL", nanos(created)); err != nil {
			return fmt.Errorf("prune login links: %w", err)
		}
		if _, err := tx.exec(ctx, "INSERT INTO login_links (hash, user_id, created, expires) VALUES (?, ?, ?, ?)",
			hash, u.ID, nanos(created), nanos(expires)); err != nil {
			return fmt.Errorf("insert login link for %q: %w", user, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// UseLoginLink spends the link: one UPDATE marks it used only if it is
// unused and unexpired, so two browsers racing for one link (even through
// two gateways) get one session.
func (s *Store) UseLoginLink(ctx context.Context, hash []byte, now time.Time) (keys.User, error) {
	var u keys.User
	err := s.update(ctx, func(tx conn) error {
		var userID int64
		err := tx.queryRow(ctx, `UPDATE login_links SET used = ?
			WHERE hash = ? AND used IS NULL AND expires > ? RETURNING user_id`, nanos(now), hash, nanos(now)).Scan(&userID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("login link: %w", keys.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("use login link: %w", err)
		}
		u, err = scanUser(tx.queryRow(ctx, "SELECT "+userCols+" FROM users WHERE id = ?", userID))
		if err != nil {
			return fmt.Errorf("user of login link: %w", err)
		}
		return nil
	})
	return u, err
}

// CreateWebSession records a login.
func (s *Store) CreateWebSession(ctx context.Context, ws keys.WebSession, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		u, err := getUser(ctx, tx, ws.User)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `INSERT INTO web_sessions (id, user_id, created, last_seen, addr, agent)
			VALUES (?, ?, ?, ?, ?, ?)`, ws.ID, u.ID, nanos(ws.Created), nanos(ws.LastSeen), ws.Addr, ws.Agent); err != nil {
			return fmt.Errorf("insert web session of %q: %w", ws.User, err)
		}
		return insertAudit(ctx, tx, rec)
	})
}

const webSessionCols = "w.id, u.name, w.created, w.last_seen, w.addr, w.agent"

func scanWebSession(r scanner) (keys.WebSession, error) {
	var ws keys.WebSession
	var created, seen int64
	if err := r.Scan(&ws.ID, &ws.User, &created, &seen, &ws.Addr, &ws.Agent); err != nil {
		return keys.WebSession{}, err
	}
	ws.Created, ws.LastSeen = fromNanos(created), fromNanos(seen)
	return ws, nil
}

// WebSession returns a login with its user.
func (s *Store) WebSession(ctx context.Context, id string) (keys.WebSession, keys.User, error) {
	ws, err := scanWebSession(s.read().queryRow(ctx, "SELECT "+webSessionCols+" FROM web_sessions w JOIN users u ON u.id = w.user_id WHERE w.id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return keys.WebSession{}, keys.User{}, fmt.Errorf("web session: %w", keys.ErrNotFound)
	}
	if err != nil {
		return keys.WebSession{}, keys.User{}, fmt.Errorf("get web session: %w", err)
	}
	u, err := getUser(ctx, s.read(), ws.User)
	if err != nil {
		return keys.WebSession{}, keys.User{}, err
	}
	return ws, u, nil
}

// ListWebSessions lists a user's logins, newest first.
func (s *Store) ListWebSessions(ctx context.Context, user string) ([]keys.WebSession, error) {
	rows, err := s.read().query(ctx, "SELECT "+webSessionCols+" FROM web_sessions w JOIN users u ON u.id = w.user_id WHERE u.name = ? ORDER BY w.created DESC", user)
	if err != nil {
		return nil, fmt.Errorf("list web sessions of %q: %w", user, err)
	}
	defer rows.Close()
	var out []keys.WebSession
	for rows.Next() {
		ws, err := scanWebSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list web sessions of %q: %w", user, err)
		}
		out = append(out, ws)
	}
	return out, rows.Err()
}

// DeleteWebSession ends one login of user.
func (s *Store) DeleteWebSession(ctx context.Context, user, id string, rec audit.Entry) error {
	return s.update(ctx, func(tx conn) error {
		res, err := tx.exec(ctx, "DELETE FROM web_sessions WHERE id = ? AND user_id = (SELECT id FROM users WHERE name = ?)", id, user)
		if err != nil {
			return fmt.Errorf("delete web session of %q: %w", user, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("session %q of %q: %w", id, user, keys.ErrNotFound)
		}
		return insertAudit(ctx, tx, rec)
	})
}

// TouchWebSession records that a login was just used.
func (s *Store) TouchWebSession(ctx context.Context, id string, at time.Time) error {
	if _, err := s.write().exec(ctx, "UPDATE web_sessions SET last_seen = ? WHERE id = ?", nanos(at), id); err != nil {
		return fmt.Errorf("touch web session: %w", err)
	}
	return nil
}

// SessionStore is the scs.Store (and scs.CtxStore) over the scs_sessions
// table. Tokens are stored as their SHA-256, so the table opens no browser.
type SessionStore struct {
	db  *Store
	now func() time.Time
}

// SessionStore returns the scs store; now is the clock (nil: time.Now).
func (s *Store) SessionStore(now func() time.Time) *SessionStore {
	if now == nil {
		now = time.Now
	}
	return &SessionStore{db: s, now: now}
}

func scsKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// FindCtx returns the data of an unexpired session.
func (ss *SessionStore) FindCtx(ctx context.Context, token string) ([]byte, bool, error) {
	var b []byte
	err := ss.db.read().queryRow(ctx, "SELECT data FROM scs_sessions WHERE token = ? AND expiry > ?", scsKey(token), nanos(ss.now())).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("find session: %w", err)
	}
	return b, true, nil
}

// commitSlack: scs commits every request's session to push its idle
// expiry; an unchanged session whose stored expiry is this close is not
// written again (a write is an fsync under synchronous=FULL, one per page
// load otherwise). The idle timeout is hours; a minute is noise.
const commitSlack = time.Minute

// CommitCtx saves session data until expiry.
func (ss *SessionStore) CommitCtx(ctx context.Context, token string, b []byte, expiry time.Time) error {
	key := scsKey(token)
	var old []byte
	var oldExpiry int64
	err := ss.db.read().queryRow(ctx, "SELECT data, expiry FROM scs_sessions WHERE token = ?", key).Scan(&old, &oldExpiry)
	if err == nil && bytes.Equal(old, b) {
		if d := expiry.Sub(fromNanos(oldExpiry)); d >= 0 && d < commitSlack {
			return nil
		}
	}
	_, err = ss.db.write().exec(ctx, `INSERT INTO scs_sessions (token, data, expiry) VALUES (?, ?, ?)
		ON CONFLICT (token) DO UPDATE SET data = excluded.data, expiry = excluded.expiry`, key, b, nanos(expiry))
	if err != nil {
		return fmt.Errorf("commit session: %w", err)
	}
	return nil
}

// DeleteCtx removes a session (no error when absent).
func (ss *SessionStore) DeleteCtx(ctx context.Context, token string) error {
	if _, err := ss.db.write().exec(ctx, "DELETE FROM scs_sessions WHERE token = ?", scsKey(token)); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpired drops expired sessions; the web front calls it now and then.
func (ss *SessionStore) DeleteExpired(ctx context.Context) (int64, error) {
	res, err := ss.db.write().exec(ctx, "DELETE FROM scs_sessions WHERE expiry <= ?", nanos(ss.now()))
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return res.RowsAffected()
}

// Find implements scs.Store.
func (ss *SessionStore) Find(token string) ([]byte, bool, error) {
	return ss.FindCtx(context.Background(), token)
}

// Commit implements scs.Store.
func (ss *SessionStore) Commit(token string, b []byte, expiry time.Time) error {
	return ss.CommitCtx(context.Background(), token, b, expiry)
}

// Delete implements scs.Store.
func (ss *SessionStore) Delete(token string) error {
	return ss.DeleteCtx(context.Background(), token)
}
