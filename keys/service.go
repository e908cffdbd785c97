package keys

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
)

// FrontCLI is the front of a local operator running sbx on the gateway host
// itself. Such an actor already has the data dir, so its Role is trusted as
// given; every other front's actor is looked up in the store on each call, so
// a user removed or disabled mid-session can do nothing more.
const FrontCLI = "cli"

// touchEvery bounds how often a use of an API key is written to the store.
const touchEvery = time.Minute

// Service is the identity core every front uses.
type Service struct {
	store Store
	audit *audit.Log
	now   func() time.Time
}

// NewService returns a Service over store that audits to log. A nil now means
// time.Now.
func NewService(store Store, log *audit.Log, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, audit: log, now: now}
}

// resultOf classifies err for the audit log.
func resultOf(err error) string {
	switch {
	case err == nil:
		return audit.ResultOK
	case errors.Is(err, ErrForbidden), errors.Is(err, ErrLastAdmin), errors.Is(err, ErrDisabled):
		return audit.ResultDenied
	}
	return audit.ResultError
}

// entry starts the audit entry of an action; the store commits it with the
// change on success, finish records it on failure.
func (s *Service) entry(actor Actor, action, target string) audit.Entry {
	return actor.Entry(s.now(), action, target)
}

// finish completes e once the action is over (see audit.Log.Finish).
func (s *Service) finish(ctx context.Context, e audit.Entry, err error) {
	s.audit.Finish(ctx, e, err, resultOf(err))
}

// authorize checks that actor may act on target's identity: admins on anyone,
// everyone else only on themselves (target == actor.User) and only when
// selfOK.
func (s *Service) authorize(ctx context.Context, actor Actor, target string, selfOK bool) error {
	role := actor.Role
	if actor.Front != FrontCLI {
		if actor.User == "" {
			return fmt.Errorf("no authenticated user: %w", ErrForbidden)
		}
		u, err := s.store.GetUser(ctx, actor.User)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("user %q no longer exists: %w", actor.User, ErrForbidden)
		}
		if err != nil {
			return err
		}
		if u.Disabled {
			return fmt.Errorf("user %q: %w", actor.User, ErrDisabled)
		}
		role = u.Role
	}
	if role == RoleAdmin || (selfOK && target == actor.User) {
		return nil
	}
	if selfOK {
		return fmt.Errorf("only admins may manage another user's keys: %w", ErrForbidden)
	}
	return fmt.Errorf("only admins may manage users: %w", ErrForbidden)
}

func fingerprints(ks []Key) string {
	fps := make([]string, len(ks))
	for i, k := range ks {
		fps[i] = k.Fingerprint
	}
	return strings.Join(fps, ",")
}

// parseNewKeys parses authorizedKeys for user and stamps them.
func (s *Service) parseNewKeys(user, authorizedKeys string) ([]Key, error) {
	ks, err := ParseAuthorizedKeys(authorizedKeys)
	if err != nil {
		return nil, err
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("no public key given: %w", ErrInvalid)
	}
	now := s.now().UTC()
	for i := range ks {
		ks[i].User, ks[i].Created = user, now
	}
	return ks, nil
}

// AddUser creates a user with the keys in authorizedKeys (at least one),
// atomically. Admins only.
func (s *Service) AddUser(ctx context.Context, actor Actor, name string, role Role, authorizedKeys string) (u User, ks []Key, err error) {
	e := s.entry(actor, "user.add", name)
	e.Detail = "role=" + short(string(role))
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, name, false); err != nil {
		return User{}, nil, err
	}
	if err := ValidName(name); err != nil {
		return User{}, nil, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return User{}, nil, err
	}
	ks, err = s.parseNewKeys(name, authorizedKeys)
	if err != nil {
		return User{}, nil, err
	}
	e.Detail += " keys=" + fingerprints(ks)
	u, err = s.store.CreateUser(ctx, User{Name: name, Role: role, Created: s.now().UTC()}, ks, e)
	if err != nil {
		return User{}, nil, err
	}
	return u, ks, nil
}

// RemoveUser deletes a user with all its keys. Admins only; never the last
// enabled admin.
func (s *Service) RemoveUser(ctx context.Context, actor Actor, name string) (err error) {
	e := s.entry(actor, "user.rm", name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, name, false); err != nil {
		return err
	}
	return s.store.DeleteUser(ctx, name, e)
}

// SetDisabled disables or enables a user. Admins only; never disables the last
// enabled admin.
func (s *Service) SetDisabled(ctx context.Context, actor Actor, name string, disabled bool) (err error) {
	action := "user.enable"
	if disabled {
		action = "user.disable"
	}
	e := s.entry(actor, action, name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, name, false); err != nil {
		return err
	}
	return s.store.SetUserDisabled(ctx, name, disabled, e)
}

// Users lists every user by name.
func (s *Service) Users(ctx context.Context) ([]User, error) { return s.store.ListUsers(ctx) }

// User returns one user by name.
func (s *Service) User(ctx context.Context, name string) (User, error) {
	return s.store.GetUser(ctx, name)
}

// AddKeys adds the keys in authorizedKeys to user. Users manage their own
// keys; admins anyone's.
func (s *Service) AddKeys(ctx context.Context, actor Actor, user, authorizedKeys string) (ks []Key, err error) {
	e := s.entry(actor, "key.add", user)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return nil, err
	}
	ks, err = s.parseNewKeys(user, authorizedKeys)
	if err != nil {
		return nil, err
	}
	e.Detail = "keys=" + fingerprints(ks)
	if err := s.store.AddKeys(ctx, user, ks, e); err != nil {
		return nil, err
	}
	return ks, nil
}

// RemoveKey removes the key with fingerprint from user; never the last key of
// the last enabled admin.
func (s *Service) RemoveKey(ctx context.Context, actor Actor, user, fingerprint string) (err error) {
	e := s.entry(actor, "key.rm", user)
	e.Detail = "key=" + fingerprintDetail(fingerprint)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return err
	}
	return s.store.DeleteKey(ctx, user, fingerprint, e)
}

// sha256Fingerprint is the shape of ssh.FingerprintSHA256: "SHA256:" and
// 43 characters of unpadded base64.
var sha256Fingerprint = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`)

// fingerprintDetail quotes a fingerprint in an audit row whole, so the row
// names the very key (short would cut it at 40 of its 50 characters); input
// of any other shape is shortened as usual.
func fingerprintDetail(fp string) string {
	if sha256Fingerprint.MatchString(fp) {
		return fp
	}
	return short(fp)
}

// Keys lists the SSH keys of user. Users list their own keys, admins
// anyone's.
func (s *Service) Keys(ctx context.Context, actor Actor, user string) ([]Key, error) {
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return nil, err
	}
	return s.store.ListKeys(ctx, user)
}

// UserByPublicKey resolves the owner of a key the client really authenticated
// with. Unknown keys give ErrNotFound, disabled users ErrDisabled.
func (s *Service) UserByPublicKey(ctx context.Context, pk ssh.PublicKey) (User, error) {
	if pk == nil {
		return User{}, fmt.Errorf("no public key: %w", ErrNotFound)
	}
	fp := ssh.FingerprintSHA256(pk)
	k, u, err := s.store.KeyByFingerprint(ctx, fp)
	if err != nil {
		return User{}, err
	}
	// The fingerprint is a hash of these bytes; comparing them too costs
	// nothing and does not rely on SHA-256 alone.
	if subtle.ConstantTimeCompare(k.PublicKey.Marshal(), pk.Marshal()) != 1 {
		return User{}, fmt.Errorf("key %s: %w", fp, ErrNotFound)
	}
	if u.Disabled {
		return User{}, fmt.Errorf("user %q: %w", u.Name, ErrDisabled)
	}
	return u, nil
}

// validAPIKeyName: 1 to 64 printable characters, no control characters.
func validAPIKeyName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("api key name must be 1 to 64 characters: %w", ErrInvalid)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fmt.Errorf("api key name %q has a control character: %w", name, ErrInvalid)
		}
	}
	return nil
}

// CreateAPIKey makes a new API key for user and returns its token, which is
// shown once and stored only as a SHA-256. ttl <= 0 means it never expires.
// Users create their own keys; admins anyone's.
func (s *Service) CreateAPIKey(ctx context.Context, actor Actor, user, name string, scopes []string, ttl time.Duration) (token string, k APIKey, err error) {
	e := s.entry(actor, "apikey.create", user)
	e.Detail = "name=" + short(name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return "", APIKey{}, err
	}
	if err := validAPIKeyName(name); err != nil {
		return "", APIKey{}, err
	}
	parsed, err := ParseScopes(scopes)
	if err != nil {
		return "", APIKey{}, err
	}
	now := s.now().UTC()
	var expires time.Time
	if ttl > 0 {
		expires = now.Add(ttl)
	}
	if p := actor.Key; p != nil {
		if len(scopes) == 0 {
			// Unasked, a key-made key gets the default rights its maker has.
			parsed = slices.DeleteFunc(parsed, func(sc Scope) bool { return !p.Rights().Covers(sc.right()) })
		}
		if ttl <= 0 {
			expires = p.Expires // unasked, it lives as long as its maker
		}
		if err := checkKeyMadeByKey(*p, scopeRights(parsed), expires); err != nil {
			return "", APIKey{}, err
		}
	}
	token, id := newToken()
	k = APIKey{ID: id, User: user, Name: name, Created: now, Expires: expires}
	for _, sc := range parsed {
		k.Scopes = append(k.Scopes, string(sc))
	}
	e.Detail += " scopes=" + strings.Join(k.Scopes, ",")
	e.Detail = "id=" + id + " " + e.Detail
	if err := s.store.CreateAPIKey(ctx, k, hashToken(token), e); err != nil {
		return "", APIKey{}, err
	}
	return token, k, nil
}

// UserByAPIKey authenticates a token. Every failure is ErrBadToken (wrapped
// with the reason, which the front should log but not show), except a
// disabled owner, which is ErrDisabled.
func (s *Service) UserByAPIKey(ctx context.Context, token string) (User, APIKey, error) {
	id, err := ParseToken(token)
	if err != nil {
		return User{}, APIKey{}, err
	}
	k, hash, u, err := s.store.APIKeyByID(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return User{}, APIKey{}, fmt.Errorf("api key %s: unknown: %w", id, ErrBadToken)
	}
	if err != nil {
		return User{}, APIKey{}, err
	}
	if subtle.ConstantTimeCompare(hashToken(token), hash) != 1 {
		return User{}, APIKey{}, fmt.Errorf("api key %s: wrong secret: %w", id, ErrBadToken)
	}
	now := s.now().UTC()
	if !k.Revoked.IsZero() {
		return User{}, APIKey{}, fmt.Errorf("api key %s: revoked: %w", id, ErrBadToken)
	}
	if !k.Expires.IsZero() && !now.Before(k.Expires) {
		return User{}, APIKey{}, fmt.Errorf("api key %s: expired: %w", id, ErrBadToken)
	}
	if u.Disabled {
		return User{}, APIKey{}, fmt.Errorf("user %q: %w", u.Name, ErrDisabled)
	}
	// Write last_used at most once a minute per key: a request storm costs
	// no write per request.
	if now.Sub(k.LastUsed) >= touchEvery {
		if err := s.store.TouchAPIKey(ctx, id, now); err != nil {
			slog.WarnContext(ctx, "record api key use", "id", id, "err", err)
		} else {
			k.LastUsed = now
		}
	}
	return u, k, nil
}

// APIKeys lists user's API keys, revoked and expired ones included. Users
// list their own keys, admins anyone's; through an API key, only one with
// the tokens scope.
func (s *Service) APIKeys(ctx context.Context, actor Actor, user string) ([]APIKey, error) {
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return nil, err
	}
	if p := actor.Key; p != nil && !p.Rights().Has(RightTokens) {
		return nil, checkKeyMadeByKey(*p, 0, time.Time{})
	}
	return s.store.ListAPIKeys(ctx, user)
}

// RevokeAPIKey revokes the API key id of user. Users revoke their own keys;
// admins anyone's.
func (s *Service) RevokeAPIKey(ctx context.Context, actor Actor, user, id string) (err error) {
	e := s.entry(actor, "apikey.revoke", user)
	e.Detail = "id=" + short(id)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, user, true); err != nil {
		return err
	}
	if p := actor.Key; p != nil {
		// Through a key, only a key it could have made: never a stronger
		// or longer-lived one (a leaked read key revoking the owner's keys).
		k, _, owner, err := s.store.APIKeyByID(ctx, id)
		if errors.Is(err, ErrNotFound) || (err == nil && owner.Name != user) {
			return fmt.Errorf("api key %q of user %q: %w", short(id), user, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := checkKeyMadeByKey(*p, k.Rights(), k.Expires); err != nil {
			return err
		}
	}
	return s.store.RevokeAPIKey(ctx, user, id, s.now().UTC(), e)
}
