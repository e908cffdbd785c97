package keys

import "context"

// BootstrapResult says how the first admin was registered, for the startup
// message.
type BootstrapResult struct {
	// Skipped: an enabled admin already existed; nothing was done.
	Skipped bool
	// Created: user "admin" was created with Keys.
	Created bool
	User    User
	Keys    []Key
	// Source names where the keys came from: "SBX_ADMIN_KEYS" or the list of
	// files read, e.g. "/root/.ssh/id_ed25519.pub".
	Source string
	// Ignored lists home-directory .pub files skipped (certificates,
	// unsupported key types) with the reason.
	Ignored []string
}

// Message is a one-paragraph startup message describing r.
func (r BootstrapResult) Message() string { return "" }

// Bootstrap creates the first admin when the store has no enabled admin.
func (s *Service) Bootstrap(ctx context.Context, adminKeysText, homeDir string) (BootstrapResult, error) {
	return BootstrapResult{}, errTODO
}
