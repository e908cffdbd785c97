package keys

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoSession means a web session was revoked, logged out, or belongs to a
// user who is gone or disabled: the browser must log in again.
var ErrNoSession = errors.New("session ended: log in again")

// SessionUser resolves a web session id to its user on every request, so a
// revoke, a logout or a disabled user ends it at once.
func (s *Service) SessionUser(ctx context.Context, id string) (User, WebSession, error) {
	ws, err := s.webStore()
	if err != nil {
		return User{}, WebSession{}, err
	}
	if len(id) != sessionIDLength || !isBase62(id) {
		return User{}, WebSession{}, ErrNoSession
	}
	sess, u, err := ws.WebSession(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return User{}, WebSession{}, ErrNoSession
	}
	if err != nil {
		return User{}, WebSession{}, err
	}
	if u.Disabled {
		return User{}, WebSession{}, fmt.Errorf("%w: %w", ErrDisabled, ErrNoSession)
	}
	if now := s.now(); now.Sub(sess.LastSeen) >= touchEvery {
		// Best effort: a failed touch only makes "last seen" older.
		_ = ws.TouchWebSession(ctx, id, now)
		sess.LastSeen = now
	}
	return u, sess, nil
}

// WebSessions lists the user's web logins; actor must be the user or an admin.
func (s *Service) WebSessions(ctx context.Context, actor Actor, user string) ([]WebSession, error) {
	ws, err := s.webStore()
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return nil, err
	}
	return ws.ListWebSessions(ctx, user)
}

// RevokeWebSession ends one login of user (logout is the user revoking their
// own current one). The next request of any tab holding it is sent to log in.
func (s *Service) RevokeWebSession(ctx context.Context, actor Actor, user, id string) (err error) {
	e := s.entry(actor, "session.revoke", user)
	e.Detail = "session " + id
	defer func() { s.finish(ctx, e, err) }()
	ws, err := s.webStore()
	if err != nil {
		return err
	}
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return err
	}
	if len(id) != sessionIDLength || !isBase62(id) {
		return fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return ws.DeleteWebSession(ctx, user, id, e)
}
