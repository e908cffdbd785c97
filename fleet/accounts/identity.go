package accounts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/errkind"
)

// Identity is who a token belongs to, as the host's API answered when the
// account was added.
type Identity struct {
	Login string // the host's user name, e.g. "octocat"
	// Scopes are a classic token's OAuth scopes, from the X-OAuth-Scopes
	// header. Fine-grained and app tokens have none: their permissions
	// are set per repository on the host, and HasScopes is false.
	Scopes    []string
	HasScopes bool
	// Expires is from the GitHub-Authentication-Token-Expiration header;
	// zero when the token does not expire (or the host did not say).
	Expires time.Time
}

// ScopesText says what the token's scopes are, for people.
func (id Identity) ScopesText() string {
	switch {
	case !id.HasScopes:
		return "none reported (a fine-grained token: its permissions are set per repository on GitHub)"
	case len(id.Scopes) == 0:
		return "none (a classic token with no scopes reaches public repositories only)"
	}
	return strings.Join(id.Scopes, ", ")
}

// ExpiresSoonWithin is how close to its expiry a token is flagged: a
// week leaves time to make a new one before boxes start failing to clone.
const ExpiresSoonWithin = 7 * 24 * time.Hour

// Checked says whether the host was asked who the token belongs to when the
// account was added: accounts saved before sbx kept the answer (schema
// version 6) have no identity. Add them again to check them.
func (id Identity) Checked() bool { return id.Login != "" }

// Expired says whether the token's expiry has passed.
func (id Identity) Expired(now time.Time) bool {
	return !id.Expires.IsZero() && !now.Before(id.Expires)
}

// ExpiresSoon says whether the token expires within ExpiresSoonWithin
// (and has not yet).
func (id Identity) ExpiresSoon(now time.Time) bool {
	return !id.Expires.IsZero() && !id.Expired(now) && id.Expires.Sub(now) < ExpiresSoonWithin
}

// ExpiresText says when the token expires, for people; an expired token
// or one that expires within ExpiresSoonWithin says so.
func (id Identity) ExpiresText(now time.Time) string {
	if !id.Checked() {
		return "unknown (added before sbx checked tokens; add it again to check)"
	}
	if id.Expires.IsZero() {
		return "never (or not reported)"
	}
	when := id.Expires.UTC().Format("2006-01-02 15:04 UTC")
	if id.Expired(now) {
		return when + " (expired)"
	}
	left := "in less than a day"
	if days := int(id.Expires.Sub(now).Hours() / 24); days > 0 {
		left = fmt.Sprintf("in %d days", days)
	}
	if id.ExpiresSoon(now) {
		left += ": expires soon"
	}
	return when + " (" + left + ")"
}

// Summary is the identity on one line, for a flash message or a log.
func (id Identity) Summary(now time.Time) string {
	return "login " + id.Login + "; scopes " + id.ScopesText() + "; expires " + id.ExpiresText(now)
}

// APIURL is the REST API base of a GitHub host: api.github.com for
// github.com, <host>/api/v3 for GitHub Enterprise Server and anything
// else (fleet/gittest answers there too). forge.APIBase is the same for
// either kind of host.
func APIURL(host *url.URL) string { return forge.APIBase(forge.GitHub, host) }

// maxIdentityBody bounds the /user answer read (GitHub's is about 1.5 KB).
const maxIdentityBody = 64 << 10

var (
	loginChars = charset.New("A-Za-z0-9-")
	// Gitea's user names also take '_' and '.'.
	giteaLoginChars = charset.New("A-Za-z0-9_.-")
	scopeChars      = charset.New("A-Za-z0-9:_-")
)

// Identify asks the host's API who token belongs to (GET <api>/user, as
// `gh auth status` does; Gitea's is <host>/api/v1/user: forge.APIBase).
// A 401 or 403 is ErrTokenRejected; a host that cannot be reached, fails
// (5xx), rate-limits or redirects (the token is never sent on to where a
// redirect points) is errkind.Unavailable.
func (s *Service) Identify(ctx context.Context, token string) (Identity, error) {
	api := forge.APIBase(s.kind, s.host)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/user", nil)
	if err != nil {
		return Identity{}, fmt.Errorf("check the token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "sbx")
	resp, err := s.client.Do(req)
	if err != nil {
		// The token is in a header, never in the URL the error shows.
		return Identity{}, fmt.Errorf("check the token at %s: %w: %w", api, errkind.Unavailable, err)
	}
	defer resp.Body.Close()
	if code := resp.StatusCode; code == http.StatusTooManyRequests || (code == http.StatusForbidden && resp.Header.Get("X-RateLimit-Remaining") == "0") {
		// GitHub answers an exhausted rate limit with 403 too: that says
		// nothing about the token.
		return Identity{}, fmt.Errorf("check the token at %s: rate limited (%s); retry later: %w", api, resp.Status, errkind.Unavailable)
	}
	if err := hostRefusal(resp, ""); err != nil {
		return Identity{}, fmt.Errorf("check the token at %s: %w", api, err)
	}
	var body struct {
		Login string `json:"login"`
	}
	chars, max, what := loginChars, 39, "GitHub user (is git.host a GitHub? else set git.kind)"
	if s.kind == forge.Gitea {
		chars, max, what = giteaLoginChars, 40, "Gitea user (is git.host a Gitea or Forgejo?)"
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxIdentityBody)).Decode(&body); err != nil || !charset.Is(body.Login, 1, max, chars, chars) {
		return Identity{}, fmt.Errorf("check the token at %s: the answer names no %s", api, what)
	}
	id := Identity{Login: body.Login}
	if h, ok := resp.Header["X-Oauth-Scopes"]; ok {
		id.HasScopes = true
		for _, sc := range strings.Split(strings.Join(h, ","), ",") {
			// Only a scope's characters reach a terminal or a page.
			if sc = strings.TrimSpace(sc); charset.Is(sc, 1, 64, scopeChars, scopeChars) {
				id.Scopes = append(id.Scopes, sc)
			}
		}
	}
	id.Expires = parseExpiry(resp.Header.Get("GitHub-Authentication-Token-Expiration"))
	return id, nil
}

// parseExpiry reads GitHub's expiry header ("2026-12-31 23:59:59 UTC", or
// with a numeric zone); zero when absent or unreadable.
func parseExpiry(v string) time.Time {
	for _, layout := range []string{"2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700"} {
		if t, err := time.Parse(layout, strings.TrimSpace(v)); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}
