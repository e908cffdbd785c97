// Package accounts keeps each user's GitHub accounts: a name and a token,
// sealed at rest with fleet/seal, checked with the host's API (who it
// belongs to) and optionally probed against a repository before it is
// saved, and chosen per repository by which account can reach it.
//
// A token is only ever sent to the host it was added for and that host's
// API (APIURL): an account records its host, an account of another host is
// never used or probed, and no redirect is followed with a token.
package accounts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

// DefaultHost is the git host accounts are for unless configured otherwise.
const DefaultHost = "https://github.com"

// Errors. Wrapped with detail; keys.ErrNotFound, keys.ErrExists,
// keys.ErrInvalid and keys.ErrForbidden are used as they are for users and
// keys, so fronts map all of them the same way.
var (
	// ErrTokenRejected: the host answered 401/403 to the token (wrong,
	// revoked or expired); another token may work, so it is Invalid.
	ErrTokenRejected = errkind.New(errkind.Invalid, "token rejected by the git host (wrong, revoked or expired)")
	// ErrUnreachable: the host answered 404, so the repository does not
	// exist or the token cannot see it (GitHub does not tell which).
	ErrUnreachable = errkind.New(errkind.NotFound, "repository not found or not visible to this token")
	// ErrNoAccount: no account of the user can reach the repository.
	ErrNoAccount = errors.New("none of the user's accounts reaches the repository")
)

// Account is what may be shown about a GitHub account: never the token.
type Account struct {
	Owner   string // the sbx user it belongs to
	Name    string // the owner's name for it, e.g. "work"
	Host    string // base URL of the git host, e.g. https://github.com
	Masked  string // the token masked for display, e.g. "ghp_…ABCD"
	Default bool
	Created time.Time
	// Identity is who the token belongs to, its scopes and expiry, as the
	// host said when the account was added; stored with the account (empty
	// for accounts added before it was: see Identity.Checked).
	Identity Identity
}

// Record is an account as stored: with its owner's user id and the sealed
// token.
type Record struct {
	Account
	OwnerID int64
	Sealed  []byte
}

// Store is the storage accounts needs; store.Store implements it (both
// dialects). Every state-changing method commits its audit row in the same
// transaction.
type Store interface {
	GetUser(ctx context.Context, name string) (keys.User, error)
	// InsertAccount saves a; the owner's first account becomes the default
	// (the returned Account says). keys.ErrExists for a taken name,
	// keys.ErrNotFound for an unknown owner.
	InsertAccount(ctx context.Context, a Account, sealed []byte, rec audit.Entry) (Account, error)
	// DeleteAccount removes one account; keys.ErrNotFound when absent.
	// Removing the default leaves the owner with no default.
	DeleteAccount(ctx context.Context, owner, name string, rec audit.Entry) error
	// SetDefaultAccount makes name the owner's only default.
	SetDefaultAccount(ctx context.Context, owner, name string, rec audit.Entry) error
	// ListAccounts returns the owner's accounts, the default first, then by
	// name.
	ListAccounts(ctx context.Context, owner string) ([]Record, error)
}

var (
	lowerDigit    = charset.New("a-z0-9")
	accountRest   = charset.New("a-z0-9_-")
	tokenChars    = charset.New("A-Za-z0-9_.-")
	alnum         = charset.New("A-Za-z0-9")
	repoOwnerRest = charset.New("A-Za-z0-9-")
	repoNameChars = charset.New("A-Za-z0-9._-")
)

// ValidName checks an account name: a lowercase letter or digit, then up to
// 31 of a-z 0-9 _ -.
func ValidName(s string) error {
	if !charset.Is(s, 1, 32, lowerDigit, accountRest) {
		return fmt.Errorf("account name %q: want a lowercase letter or digit then up to 31 of a-z 0-9 _ -: %w", s, keys.ErrInvalid)
	}
	return nil
}

// Token characters: GitHub's classic (ghp_…) and fine-grained
// (github_pat_…) tokens, and app tokens, are [A-Za-z0-9_]; '-' and '.' cover
// other hosts. Nothing that could break a URL, a header or a terminal.

// ValidToken checks a token's syntax. The message never echoes the token.
func ValidToken(tok string) error {
	if !charset.Is(tok, 8, 255, tokenChars, tokenChars) {
		return fmt.Errorf("token: want 8 to 255 of A-Z a-z 0-9 _ . - (got %d bytes): %w", len(tok), keys.ErrInvalid)
	}
	return nil
}

// Mask shows a token's known prefix and its last four characters, e.g.
// "ghp_…ABCD". Tokens shorter than 20 characters show only the prefix.
func Mask(tok string) string {
	prefix := ""
	for _, p := range []string{"github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"} {
		if strings.HasPrefix(tok, p) {
			prefix = p
			break
		}
	}
	if len(tok) < 20 {
		return prefix + "…"
	}
	return prefix + "…" + tok[len(tok)-4:]
}

// Repo is a repository on the git host.
type Repo struct {
	Owner string
	Name  string
}

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// ParseRepo parses "owner/name" (a trailing ".git" is dropped), with
// GitHub's rules: owner is letters, digits and '-' (at most 39, not starting
// with '-'); name is letters, digits, '.', '_', '-', not "." or ".." and
// not itself ending in ".git" (so the result round-trips).
func ParseRepo(s string) (Repo, error) {
	owner, name, ok := strings.Cut(s, "/")
	name = strings.TrimSuffix(name, ".git")
	if !ok || !charset.Is(owner, 1, 39, alnum, repoOwnerRest) || !charset.Is(name, 1, 100, repoNameChars, repoNameChars) || name == "." || name == ".." || strings.HasSuffix(name, ".git") {
		return Repo{}, fmt.Errorf("repository %q: want owner/name: %w", s, keys.ErrInvalid)
	}
	return Repo{Owner: owner, Name: name}, nil
}

// ParseHost checks a git host base URL: https, or http only for a loopback
// address (tests); no credentials, query or fragment. The result has no
// trailing slash.
func ParseHost(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("git host %q: %w", raw, keys.ErrInvalid)
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, fmt.Errorf("git host %q: scheme must be https: %w", raw, keys.ErrInvalid)
	case u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("git host %q: no host: %w", raw, keys.ErrInvalid)
	case u.User != nil:
		return nil, fmt.Errorf("git host %q: must not hold credentials: %w", raw, keys.ErrInvalid)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("git host %q: must not have a query or fragment: %w", raw, keys.ErrInvalid)
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, fmt.Errorf("git host %q: http is allowed only for loopback (tests); use https: %w", raw, keys.ErrInvalid)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
