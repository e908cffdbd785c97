// Package forge is the gateway's side of a git host's API: the pull
// requests a box's branch becomes, their checks, reviews and merge, and the
// repositories an account can reach. The gateway makes every call with the
// account's token; the box never holds it.
//
// Two kinds of host sit behind the one Forge interface: GitHub (github.com
// and GitHub Enterprise Server, REST v3) and Gitea/Forgejo (REST v1). A
// front never talks to a forge: it asks the core (fleet), which picks the
// account, calls the forge and writes the audit row.
package forge

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"sbx.dev/sbx/internal/errkind"
)

// Kind names the API a host speaks.
type Kind string

const (
	GitHub Kind = "github" // github.com and GitHub Enterprise Server
	Gitea  Kind = "gitea"  // Gitea and Forgejo
)

// ParseKind accepts "github" and "gitea" ("forgejo" is Gitea's API).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "github":
		return GitHub, nil
	case "gitea", "forgejo":
		return Gitea, nil
	}
	return "", fmt.Errorf("forge kind %q: want github or gitea (forgejo): %w", s, errkind.Invalid)
}

// Repo is a repository on the host. In JSON it is one string,
// "owner/name", as every front writes a repository (a box's repos, MCP's
// answers), so a script reads .repo the same way from each.
type Repo struct {
	Owner string
	Name  string
}

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// MarshalText writes "owner/name".
func (r Repo) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads "owner/name": two non-empty parts, one slash.
func (r *Repo) UnmarshalText(b []byte) error {
	owner, name, ok := strings.Cut(string(b), "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("repository %q: want owner/name: %w", b, errkind.Invalid)
	}
	*r = Repo{Owner: owner, Name: name}
	return nil
}

// RepoInfo is one repository an account can reach.
type RepoInfo struct {
	Repo          Repo      `json:"repo"`
	Description   string    `json:"description,omitempty"`
	Private       bool      `json:"private"`
	DefaultBranch string    `json:"default_branch"`
	URL           string    `json:"url"` // the web page
	Updated       time.Time `json:"updated,omitzero"`
}

// PR states.
const (
	StateOpen   = "open"
	StateClosed = "closed" // closed without merging
	StateMerged = "merged"
)

// Mergeable answers.
const (
	MergeableYes      = "yes"
	MergeableConflict = "conflict" // the branch does not merge cleanly
	MergeableUnknown  = "unknown"  // the host has not computed it yet
)

// Review states: the latest verdict that counts.
const (
	ReviewNone             = "none"
	ReviewApproved         = "approved"
	ReviewChangesRequested = "changes_requested"
)

// PullRequest is the card of one pull request.
type PullRequest struct {
	Repo      Repo      `json:"repo"`
	Number    int       `json:"number"`
	URL       string    `json:"url"` // the web page
	Title     string    `json:"title"`
	Body      string    `json:"body,omitempty"`
	State     string    `json:"state"` // StateOpen, StateClosed, StateMerged
	Draft     bool      `json:"draft"`
	Head      string    `json:"head"`     // branch, e.g. sbx/BOX
	HeadSHA   string    `json:"head_sha"` // the commit the checks are for
	Base      string    `json:"base"`
	Mergeable string    `json:"mergeable"` // MergeableYes, MergeableConflict, MergeableUnknown
	Review    string    `json:"review"`    // ReviewNone, ReviewApproved, ReviewChangesRequested
	Checks    []Check   `json:"checks"`
	Author    string    `json:"author,omitempty"`
	Created   time.Time `json:"created,omitzero"`
	Updated   time.Time `json:"updated,omitzero"`
	MergedAt  time.Time `json:"merged_at,omitzero"`
	MergeSHA  string    `json:"merge_sha,omitempty"`
}

// Check outcomes. A host's finer words (timed_out, action_required,
// cancelled, error, skipped, neutral) map onto these four.
const (
	CheckPending = "pending" // queued or running
	CheckSuccess = "success"
	CheckFailure = "failure"
	CheckNeutral = "neutral" // skipped, neutral: neither blocks nor passes
)

// Check is one status or check run on the head commit.
type Check struct {
	Name    string `json:"name"`             // the context or check-run name
	Outcome string `json:"outcome"`          // CheckPending, CheckSuccess, CheckFailure, CheckNeutral
	Detail  string `json:"detail,omitempty"` // the host's own word and description
	URL     string `json:"url,omitempty"`
}

// ChecksOutcome sums up checks: failure if any failed, else pending if any
// is pending, else success if any succeeded, else "" (no checks at all).
func ChecksOutcome(checks []Check) string {
	out := ""
	for _, c := range checks {
		switch c.Outcome {
		case CheckFailure:
			return CheckFailure
		case CheckPending:
			out = CheckPending
		case CheckSuccess:
			if out == "" {
				out = CheckSuccess
			}
		}
	}
	return out
}

// OpenRequest is a pull request to open.
type OpenRequest struct {
	Repo  Repo
	Head  string // the box's branch
	Base  string // "" means the repository's default branch
	Title string
	Body  string
	Draft bool
}

// MergeMethod is how a pull request lands.
type MergeMethod string

const (
	Merge  MergeMethod = "merge"
	Squash MergeMethod = "squash"
	Rebase MergeMethod = "rebase"
)

// Forge is one git host's API. Every method takes the token of the account
// that acts; none is kept. Errors carry an errkind: NotFound (no such
// repository or pull request, or the token cannot see it), Forbidden (the
// token may not do this), Invalid (the host refused the request, e.g. no
// commits between head and base, or the token was rejected), Conflict (not
// mergeable, or the head moved since HeadSHA), Unavailable (the host could
// not be reached, failed, or rate-limited). Messages never hold the token.
type Forge interface {
	Kind() Kind
	// Open opens a pull request from req.Head. If one is already open from
	// that head it is returned instead (with ok=false), so a retry or a
	// second `pr` never opens two.
	Open(ctx context.Context, token string, req OpenRequest) (pr PullRequest, opened bool, err error)
	// Get is the card of pull request number, with its checks and review.
	Get(ctx context.Context, token string, repo Repo, number int) (PullRequest, error)
	// Merge merges it; sha, when set, is the head the caller saw (the host
	// refuses with Conflict if the head moved).
	Merge(ctx context.Context, token string, repo Repo, number int, method MergeMethod, sha string) (PullRequest, error)
	// Close closes it without merging.
	Close(ctx context.Context, token string, repo Repo, number int) (PullRequest, error)
	// Repos lists the repositories the token can reach whose owner/name
	// contains query (case-insensitive; "" is all), most recently updated
	// first, at most limit.
	Repos(ctx context.Context, token, query string, limit int) ([]RepoInfo, error)
}

// APIBase is the REST API root of a host of kind k at base (the web
// address people clone from): api.github.com for github.com,
// base/api/v3 for GitHub Enterprise, base/api/v1 for Gitea.
func APIBase(k Kind, base *url.URL) string {
	b := strings.TrimSuffix(base.String(), "/")
	switch {
	case k == GitHub && base.Host == "github.com" && strings.Trim(base.Path, "/") == "":
		return "https://api.github.com"
	case k == Gitea:
		return b + "/api/v1"
	}
	return b + "/api/v3"
}
