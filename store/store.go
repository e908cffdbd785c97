// Package store keeps sbx's state in SQLite (modernc.org/sqlite, pure Go, so
// the binary stays static). All SQL lives here; the core talks to the small
// interfaces keys.Store and audit.Store, which a PostgreSQL store can
// implement too.
package store

import (
	"context"
	"errors"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// SQLite is the embedded store.
type SQLite struct{}

var (
	_ keys.Store  = (*SQLite)(nil)
	_ audit.Store = (*SQLite)(nil)
)

var errTODO = errors.New("TODO")

// Open opens (creating if needed) the database at path and applies pending
// migrations.
func Open(ctx context.Context, path string) (*SQLite, error) { return &SQLite{}, nil }

// Close closes the database.
func (s *SQLite) Close() error { return nil }

func (s *SQLite) CreateUser(ctx context.Context, u keys.User, ks []keys.Key) (keys.User, error) {
	return u, errTODO
}
func (s *SQLite) DeleteUser(ctx context.Context, name string) error { return errTODO }
func (s *SQLite) SetUserDisabled(ctx context.Context, name string, disabled bool) error {
	return errTODO
}
func (s *SQLite) GetUser(ctx context.Context, name string) (keys.User, error) {
	return keys.User{}, errTODO
}
func (s *SQLite) ListUsers(ctx context.Context) ([]keys.User, error)         { return nil, errTODO }
func (s *SQLite) CountEnabledAdmins(ctx context.Context) (int, error)        { return 0, errTODO }
func (s *SQLite) AddKeys(ctx context.Context, u string, ks []keys.Key) error { return errTODO }
func (s *SQLite) DeleteKey(ctx context.Context, user, fp string) error       { return errTODO }
func (s *SQLite) ListKeys(ctx context.Context, user string) ([]keys.Key, error) {
	return nil, errTODO
}
func (s *SQLite) KeyByFingerprint(ctx context.Context, fp string) (keys.Key, keys.User, error) {
	return keys.Key{}, keys.User{}, errTODO
}
func (s *SQLite) CreateAPIKey(ctx context.Context, k keys.APIKey, hash []byte) error { return errTODO }
func (s *SQLite) APIKeyByID(ctx context.Context, id string) (keys.APIKey, []byte, keys.User, error) {
	return keys.APIKey{}, nil, keys.User{}, errTODO
}
func (s *SQLite) ListAPIKeys(ctx context.Context, user string) ([]keys.APIKey, error) {
	return nil, errTODO
}
func (s *SQLite) RevokeAPIKey(ctx context.Context, user, id string, at time.Time) error {
	return errTODO
}
func (s *SQLite) TouchAPIKey(ctx context.Context, id string, at time.Time) error { return errTODO }
func (s *SQLite) InsertAudit(ctx context.Context, e audit.Entry) (int64, error)  { return 0, errTODO }
func (s *SQLite) ListAudit(ctx context.Context, f audit.Filter) ([]audit.Entry, error) {
	return nil, errTODO
}
