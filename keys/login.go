package keys

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
)

// One-time login links: `ssh … login` prints https://host/login/<token>.
// The token is the only secret ever carried in a URL, so it is single use,
// short-lived, bound to one user and stored only as its SHA-256.
const (
	LoginPrefix = "sbxl_"
	// LoginTTL is how long a login link works.
	LoginTTL        = 5 * time.Minute
	loginSecretLen  = 43 // about 256 bits of base62
	maxLoginLen     = 64
	sessionIDLength = 22 // about 131 bits: a row id, not a credential
)

// ErrBadLogin covers every login link that does not log in: malformed,
// unknown, used, expired, or of a disabled user. Fronts show it as is.
var ErrBadLogin = errors.New("invalid, used or expired login link")

// WebSession is one browser login of a user, listed and revoked from the
// settings page. Its ID names the login, not the cookie: the cookie's token
// is renewed at login and logout, the ID stays.
type WebSession struct {
	ID       string
	User     string
	Created  time.Time
	LastSeen time.Time // updated at most once a minute
	Addr     string    // client address at login
	Agent    string    // browser User-Agent at login, truncated
}

// WebStore is the storage login links and web sessions need; store.Store
// implements it (both dialects). Each state-changing method commits rec with
// the change.
type WebStore interface {
	CreateLoginLink(ctx context.Context, user string, hash []byte, created, expires time.Time, rec audit.Entry) error
	// UseLoginLink marks the unused, unexpired link with hash as used and
	// returns its user; ErrNotFound when there is no such usable link.
	UseLoginLink(ctx context.Context, hash []byte, now time.Time) (User, error)
	CreateWebSession(ctx context.Context, s WebSession, rec audit.Entry) error
	// WebSession returns the login and its user; ErrNotFound when revoked.
	WebSession(ctx context.Context, id string) (WebSession, User, error)
	ListWebSessions(ctx context.Context, user string) ([]WebSession, error)
	// DeleteWebSession ends the login id of user; ErrNotFound when absent.
	DeleteWebSession(ctx context.Context, user, id string, rec audit.Entry) error
	TouchWebSession(ctx context.Context, id string, at time.Time) error
}

// webStore is the service's store as a WebStore. Not every Store need
// implement it (a front without a browser does not); then web logins fail.
func (s *Service) webStore() (WebStore, error) {
	ws, ok := s.store.(WebStore)
	if !ok {
		return nil, fmt.Errorf("web logins: the store does not keep web sessions: %w", ErrInvalid)
	}
	return ws, nil
}

// CreateLoginLink makes a one-time login token for the actor's own user (an
// admin may name another); the caller puts it in a link.
func (s *Service) CreateLoginLink(ctx context.Context, actor Actor, user string) (token string, expires time.Time, err error) {
	e := s.entry(actor, "login.link", user)
	defer func() { s.finish(ctx, e, err) }()
	ws, err := s.webStore()
	if err != nil {
		return "", time.Time{}, err
	}
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return "", time.Time{}, err
	}
	u, err := s.store.GetUser(ctx, user)
	if err != nil {
		return "", time.Time{}, err
	}
	if u.Disabled {
		return "", time.Time{}, fmt.Errorf("login link for %q: %w", user, ErrDisabled)
	}
	now := s.now()
	token = LoginPrefix + randomBase62(loginSecretLen)
	expires = now.Add(LoginTTL)
	e.Detail = "expires " + expires.UTC().Format(time.RFC3339)
	if err := ws.CreateLoginLink(ctx, user, hashToken(token), now, expires, e); err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// LoginPath is where the web console takes a login link's token.
const LoginPath = "/login/"

// LoginURL is the link `ssh … login` prints: base is the console's public
// URL (e.g. https://sbx.example.com), token from CreateLoginLink.
func LoginURL(base, token string) string {
	return strings.TrimSuffix(base, "/") + LoginPath + token
}

// ValidLoginToken checks a login token's shape without touching the store.
func ValidLoginToken(token string) bool {
	rest, ok := strings.CutPrefix(token, LoginPrefix)
	return ok && len(token) <= maxLoginLen && len(rest) == loginSecretLen && isBase62(rest)
}

// Login spends a login link and starts a web session for its user. addr
// and agent describe the browser for the sessions list. Every failure is
// ErrBadLogin (audited with the reason), so a probe learns nothing.
func (s *Service) Login(ctx context.Context, token, addr, agent string) (_ User, _ WebSession, err error) {
	e := audit.Entry{Time: s.now().UTC(), Front: "http", Action: "login", Addr: addr, Result: audit.ResultOK}
	defer func() { s.finish(ctx, e, err) }()
	ws, err := s.webStore()
	if err != nil {
		return User{}, WebSession{}, err
	}
	if !ValidLoginToken(token) {
		return User{}, WebSession{}, fmt.Errorf("malformed token: %w", ErrBadLogin)
	}
	u, err := ws.UseLoginLink(ctx, hashToken(token), s.now())
	if errors.Is(err, ErrNotFound) {
		return User{}, WebSession{}, fmt.Errorf("unknown, used or expired token: %w", ErrBadLogin)
	}
	if err != nil {
		return User{}, WebSession{}, err
	}
	e.Actor, e.Target = u.Name, u.Name
	if u.Disabled {
		return User{}, WebSession{}, fmt.Errorf("%w: %w", ErrDisabled, ErrBadLogin)
	}
	if len(agent) > 200 {
		agent = agent[:200]
	}
	now := s.now()
	sess := WebSession{ID: randomBase62(sessionIDLength), User: u.Name, Created: now, LastSeen: now, Addr: addr, Agent: audit.Printable(agent)}
	e.Detail = "session " + sess.ID
	if err := ws.CreateWebSession(ctx, sess, e); err != nil {
		return User{}, WebSession{}, err
	}
	return u, sess, nil
}
