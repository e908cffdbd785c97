// Package keys holds identities: users, their SSH public keys, API keys and
// the gateway's SSH host key. Every state-changing method of Service checks
// who is acting and writes an audit row itself, so no front can forget either.
package keys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/errkind"
)

// Role is what a user may do. Admins manage users; operators manage their own
// keys and boxes.
type Role string

const (
	RoleAdmin    Role = "admin"
	RoleOperator Role = "operator"
)

// ParseRole accepts "admin" or "operator".
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleOperator:
		return r, nil
	}
	return "", fmt.Errorf("role %q: want admin or operator: %w", s, ErrInvalid)
}

// Sentinel errors. They are wrapped with detail; their messages are written to
// read well at the end of a one-line CLI error. Each is of an errkind kind,
// which is what fronts answer.
var (
	ErrNotFound  = errkind.NotFound
	ErrExists    = errkind.New(errkind.Conflict, "already exists")
	ErrLastAdmin = errkind.New(errkind.Forbidden, "refused: it would leave no enabled admin")
	ErrForbidden = errkind.New(errkind.Forbidden, "permission denied")
	ErrInvalid   = errkind.Invalid
	ErrDisabled  = errkind.New(errkind.Forbidden, "user is disabled")
	// ErrBadToken covers every API key that does not authenticate: malformed,
	// unknown, wrong secret, revoked, expired. Fronts show it without detail.
	ErrBadToken = errors.New("invalid, revoked or expired API key")
)

// User is an identity that can log in.
type User struct {
	ID       int64
	Name     string
	Role     Role
	Disabled bool
	Created  time.Time
}

// Key is one SSH public key of a user.
type Key struct {
	User        string // owner's name
	Fingerprint string // ssh.FingerprintSHA256, "SHA256:..."
	Type        string // e.g. "ssh-ed25519"
	Comment     string
	PublicKey   ssh.PublicKey
	Created     time.Time
}

// APIKey describes an API key; the secret part of the token is never stored.
type APIKey struct {
	ID       string // the 8-character id inside the token
	User     string
	Name     string
	Scopes   []string
	Created  time.Time
	Expires  time.Time // zero: never
	Revoked  time.Time // zero: not revoked
	LastUsed time.Time // zero: never used; updated at most once a minute
}

// Actor is whoever performs a state-changing call, as the front saw them.
type Actor struct {
	User  string
	Role  Role
	Front string // "ssh", "http", "mcp", "cli"
	Addr  string
	// Key is the API key the request authenticated with; nil for SSH, a
	// browser session or the CLI. Key management through a key is bound by
	// the key's own scopes and expiry.
	Key *APIKey
}

// Entry starts the audit entry of an action the actor takes at time at; its
// result is ok until audit.Log.Finish says otherwise.
func (a Actor) Entry(at time.Time, action, target string) audit.Entry {
	return audit.Entry{
		Time: at.UTC(), Actor: a.User, Front: a.Front, Action: action,
		Target: target, Addr: a.Addr, Result: audit.ResultOK,
	}
}

// Store is the storage keys needs; store.Store implements it (both dialects).
// Methods that guard an invariant across rows (last enabled admin, unique
// fingerprint) do the check and the write in one transaction and report the
// keys sentinel errors (ErrNotFound, ErrExists, ErrLastAdmin) wrapped with
// detail. Every state-changing method takes the audit row describing its
// success and commits it in the same transaction as the change.
type Store interface {
	// CreateUser inserts u and its keys atomically and returns u with its ID.
	CreateUser(ctx context.Context, u User, keys []Key, rec audit.Entry) (User, error)
	// DeleteUser removes a user with its keys and API keys; ErrLastAdmin when
	// it is the last enabled admin.
	DeleteUser(ctx context.Context, name string, rec audit.Entry) error
	// SetUserDisabled; ErrLastAdmin when disabling the last enabled admin.
	SetUserDisabled(ctx context.Context, name string, disabled bool, rec audit.Entry) error
	GetUser(ctx context.Context, name string) (User, error)
	ListUsers(ctx context.Context) ([]User, error)
	// CountEnabledAdmins counts users with role admin that are not disabled.
	CountEnabledAdmins(ctx context.Context) (int, error)

	// AddKeys adds keys to an existing user, all or none.
	AddKeys(ctx context.Context, user string, keys []Key, rec audit.Entry) error
	// DeleteKey removes one key; ErrLastAdmin when it is the last key of the
	// last enabled admin.
	DeleteKey(ctx context.Context, user, fingerprint string, rec audit.Entry) error
	ListKeys(ctx context.Context, user string) ([]Key, error)
	// KeyByFingerprint returns the key and its owner.
	KeyByFingerprint(ctx context.Context, fingerprint string) (Key, User, error)

	CreateAPIKey(ctx context.Context, k APIKey, hash []byte, rec audit.Entry) error
	// APIKeyByID returns the key, the SHA-256 of its token and its owner.
	APIKeyByID(ctx context.Context, id string) (APIKey, []byte, User, error)
	ListAPIKeys(ctx context.Context, user string) ([]APIKey, error)
	RevokeAPIKey(ctx context.Context, user, id string, at time.Time, rec audit.Entry) error
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

var (
	nameFirst = charset.New("a-z")
	nameRest  = charset.New("a-z0-9_-")
)

// ValidName reports whether s is a valid user name: [a-z][a-z0-9_-]{0,31}.
func ValidName(s string) error {
	if !charset.Is(s, 1, 32, nameFirst, nameRest) {
		return fmt.Errorf("user name %q: want a lowercase letter then up to 31 of a-z 0-9 _ -: %w", s, ErrInvalid)
	}
	return nil
}
