package keys

import (
	"context"
	"errors"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
)

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

var errTODO = errors.New("TODO")

// AddUser creates a user with the keys in authorizedKeys (at least one),
// atomically. Admins only.
func (s *Service) AddUser(ctx context.Context, actor Actor, name string, role Role, authorizedKeys string) (User, []Key, error) {
	return User{}, nil, errTODO
}

// RemoveUser deletes a user with all its keys. Admins only; never the last
// enabled admin.
func (s *Service) RemoveUser(ctx context.Context, actor Actor, name string) error {
	return errTODO
}

// SetDisabled disables or enables a user. Admins only; never disables the last
// enabled admin.
func (s *Service) SetDisabled(ctx context.Context, actor Actor, name string, disabled bool) error {
	return errTODO
}

// Users lists every user by name.
func (s *Service) Users(ctx context.Context) ([]User, error) { return nil, errTODO }

// User returns one user by name.
func (s *Service) User(ctx context.Context, name string) (User, error) { return User{}, errTODO }

// AddKeys adds the keys in authorizedKeys to user. Users manage their own
// keys; admins anyone's.
func (s *Service) AddKeys(ctx context.Context, actor Actor, user, authorizedKeys string) ([]Key, error) {
	return nil, errTODO
}

// RemoveKey removes the key with fingerprint from user.
func (s *Service) RemoveKey(ctx context.Context, actor Actor, user, fingerprint string) error {
	return errTODO
}

// Keys lists the SSH keys of user.
func (s *Service) Keys(ctx context.Context, user string) ([]Key, error) { return nil, errTODO }

// UserByPublicKey resolves the owner of a key the client really authenticated
// with. Disabled users give ErrDisabled.
func (s *Service) UserByPublicKey(ctx context.Context, pk ssh.PublicKey) (User, error) {
	return User{}, errTODO
}

// CreateAPIKey makes a new API key for user and returns its token, which is
// shown once and stored only as a SHA-256. ttl <= 0 means it never expires.
func (s *Service) CreateAPIKey(ctx context.Context, actor Actor, user, name string, scopes []string, ttl time.Duration) (string, APIKey, error) {
	return "", APIKey{}, errTODO
}

// UserByAPIKey authenticates a token. Every failure is ErrBadToken (wrapped
// with the reason), except a disabled owner, which is ErrDisabled.
func (s *Service) UserByAPIKey(ctx context.Context, token string) (User, APIKey, error) {
	return User{}, APIKey{}, errTODO
}

// APIKeys lists user's API keys, revoked and expired ones included.
func (s *Service) APIKeys(ctx context.Context, user string) ([]APIKey, error) { return nil, errTODO }

// RevokeAPIKey revokes the API key id of user.
func (s *Service) RevokeAPIKey(ctx context.Context, actor Actor, user, id string) error {
	return errTODO
}
