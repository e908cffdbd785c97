package accounts

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

// Sealer seals tokens at rest; *seal.Sealer implements it.
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
	Open(sealed, aad []byte) ([]byte, error)
}

// Config configures a Service. Zero values work.
type Config struct {
	// Host is the git host's base URL; "" means DefaultHost. http is
	// accepted only for loopback (tests against fleet/gittest).
	Host string
	// Kind is the API the host speaks (forge.GitHub or forge.Gitea); ""
	// means forge.GitHub. It decides where a token's identity is asked
	// (forge.APIBase).
	Kind forge.Kind
	// Client makes the probe requests; nil means one with ProbeTimeout.
	// Its redirect policy is replaced: a token is never sent on to where a
	// redirect points.
	Client *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ProbeTimeout bounds one probe request when Config.Client is nil.
const ProbeTimeout = 15 * time.Second

// Service manages GitHub accounts for every front and for the core.
type Service struct {
	store  Store
	sealer Sealer
	audit  *audit.Log
	host   *url.URL
	kind   forge.Kind
	client *http.Client
	now    func() time.Time
}

// New returns a Service. It fails on an invalid host.
func New(store Store, sealer Sealer, log *audit.Log, cfg Config) (*Service, error) {
	if cfg.Host == "" {
		cfg.Host = DefaultHost
	}
	host, err := ParseHost(cfg.Host)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: ProbeTimeout}
	if cfg.Client != nil {
		c := *cfg.Client
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Kind == "" {
		cfg.Kind = forge.GitHub
	}
	if _, err := forge.ParseKind(string(cfg.Kind)); err != nil {
		return nil, err
	}
	return &Service{store: store, sealer: sealer, audit: log, host: host, kind: cfg.Kind, client: client, now: cfg.Now}, nil
}

// Host is the configured git host's base URL.
func (s *Service) Host() string { return s.host.String() }

// Kind is the API the configured git host speaks.
func (s *Service) Kind() forge.Kind { return s.kind }

// CloneURL is the HTTPS URL of repo on the host, without credentials.
func (s *Service) CloneURL(repo Repo) string {
	return s.host.String() + "/" + repo.Owner + "/" + repo.Name + ".git"
}

// ResolveRepo accepts "owner/name" or a URL of a repository on the
// configured host ("https://github.com/owner/name(.git)"); a URL of another
// host is refused, since no account's token may go there.
func (s *Service) ResolveRepo(in string) (Repo, error) {
	if !strings.Contains(in, "://") {
		return ParseRepo(in)
	}
	u, err := url.Parse(in)
	if err != nil {
		return Repo{}, fmt.Errorf("repository URL %q: %w", in, keys.ErrInvalid)
	}
	if u.Scheme != s.host.Scheme || u.Host != s.host.Host || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Repo{}, fmt.Errorf("repository URL %q: want %s/owner/name: %w", in, s.host, keys.ErrInvalid)
	}
	rest, ok := strings.CutPrefix(u.Path, s.host.Path+"/")
	if !ok {
		return Repo{}, fmt.Errorf("repository URL %q: want %s/owner/name: %w", in, s.host, keys.ErrInvalid)
	}
	return ParseRepo(strings.TrimSuffix(rest, "/"))
}

func aad(ownerID int64, name string) []byte {
	return fmt.Appendf(nil, "github-account:%d:%s", ownerID, name)
}

// Probe checks that token can read repo on the host: a smart-HTTP ref
// advertisement request (GET <host>/<owner>/<name>.git/info/refs
// ?service=git-upload-pack) with basic auth x-access-token:<token>, as git
// itself would send. nil means the token can clone the repository;
// ErrTokenRejected and ErrUnreachable are the host's two refusals.
func (s *Service) Probe(ctx context.Context, repo Repo, token string) error {
	u := s.CloneURL(repo) + "/info/refs?service=git-upload-pack"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", repo, err)
	}
	req.SetBasicAuth("x-access-token", token)
	req.Header.Set("User-Agent", "git/2.39.5 (sbx)")
	resp, err := s.client.Do(req)
	if err != nil {
		// The URL in a *url.Error holds no credentials (they are in a
		// header), so the message is safe to show.
		return fmt.Errorf("probe %s at %s: %w: %w", repo, s.host, errkind.Unavailable, err)
	}
	defer resp.Body.Close()
	head := make([]byte, 64)
	n, _ := io.ReadFull(resp.Body, head)
	head = head[:n]
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("probe %s: %w", repo, ErrUnreachable)
	}
	if err := hostRefusal(resp, " from "+s.host.String()); err != nil {
		return fmt.Errorf("probe %s: %w", repo, err)
	}
	switch {
	case resp.Header.Get("Content-Type") != "application/x-git-upload-pack-advertisement" ||
		!strings.Contains(string(head), "# service=git-upload-pack"):
		return fmt.Errorf("probe %s: %s did not answer as a smart-HTTP git host (Content-Type %q)", repo, s.host, resp.Header.Get("Content-Type"))
	}
	return nil
}

// hostRefusal reads a git host's answer other than 200 OK the same for
// every call that sends it a token: 401 and 403 reject the token, a
// redirect is not followed with it, 5xx is the host's own failure
// (Unavailable), anything else is unexpected; nil for 200. from ends the
// texts that quote the status (" from <host>", or empty).
func hostRefusal(resp *http.Response, from string) error {
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return fmt.Errorf("%s: %w", resp.Status, ErrTokenRejected)
	case code >= 300 && code < 400:
		return fmt.Errorf("redirected to %q; not following with a token: %w", resp.Header.Get("Location"), errkind.Unavailable)
	case code >= 500:
		return fmt.Errorf("%s%s: %w", resp.Status, from, errkind.Unavailable)
	case code != http.StatusOK:
		return fmt.Errorf("unexpected %s%s", resp.Status, from)
	}
	return nil
}

func resultOf(err error) string {
	switch {
	case err == nil:
		return audit.ResultOK
	case errors.Is(err, keys.ErrForbidden), errors.Is(err, keys.ErrDisabled), errors.Is(err, ErrTokenRejected):
		return audit.ResultDenied
	}
	return audit.ResultError
}

func (s *Service) entry(actor keys.Actor, action, target string) audit.Entry {
	return actor.Entry(s.now(), action, target)
}

// finish completes e once the action is over (see audit.Log.Finish).
func (s *Service) finish(ctx context.Context, e audit.Entry, err error) {
	s.audit.Finish(ctx, e, err, resultOf(err))
}

// authorize: users manage their own accounts, admins anyone's. The actor's
// role is read back from the store (it may have changed since login),
// except for the local CLI.
func (s *Service) authorize(ctx context.Context, actor keys.Actor, owner string) error {
	role := actor.Role
	if actor.Front != keys.FrontCLI {
		if actor.User == "" {
			return fmt.Errorf("no authenticated user: %w", keys.ErrForbidden)
		}
		u, err := s.store.GetUser(ctx, actor.User)
		if errors.Is(err, keys.ErrNotFound) {
			return fmt.Errorf("user %q no longer exists: %w", actor.User, keys.ErrForbidden)
		}
		if err != nil {
			return err
		}
		if u.Disabled {
			return fmt.Errorf("user %q: %w", actor.User, keys.ErrDisabled)
		}
		role = u.Role
	}
	if role == keys.RoleAdmin || owner == actor.User {
		return nil
	}
	return fmt.Errorf("only admins may manage another user's GitHub accounts: %w", keys.ErrForbidden)
}

// Add saves a GitHub account for owner after checking token with the
// host's API (Identify: who it belongs to, its scopes and expiry) and, when
// probe is not the zero Repo, that it can read probe; nothing is saved when
// a check fails. The owner's first account becomes the default.
func (s *Service) Add(ctx context.Context, actor keys.Actor, owner, name, token string, probe Repo) (a Account, err error) {
	e := s.entry(actor, "account.add", owner+"/"+name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, owner); err != nil {
		return Account{}, err
	}
	if err := ValidName(name); err != nil {
		return Account{}, err
	}
	if err := ValidToken(token); err != nil {
		return Account{}, err
	}
	probing := probe != Repo{}
	if _, err := ParseRepo(probe.String()); probing && err != nil {
		return Account{}, fmt.Errorf("probe repository: %w", err)
	}
	e.Detail = fmt.Sprintf("host=%s token=%s", s.host, Mask(token))
	if probing {
		e.Detail += " probe=" + probe.String()
	}
	u, err := s.store.GetUser(ctx, owner)
	if err != nil {
		return Account{}, err
	}
	id, err := s.Identify(ctx, token)
	if err != nil {
		return Account{}, err
	}
	e.Detail += " login=" + id.Login
	if probing {
		if err := s.Probe(ctx, probe, token); err != nil {
			return Account{}, err
		}
	}
	sealed, err := s.sealer.Seal([]byte(token), aad(u.ID, name))
	if err != nil {
		return Account{}, fmt.Errorf("seal token of account %q: %w", name, err)
	}
	a = Account{Owner: owner, Name: name, Host: s.host.String(), Masked: Mask(token), Created: s.now().UTC(), Identity: id}
	return s.store.InsertAccount(ctx, a, sealed, e)
}

// Remove deletes one of owner's accounts.
func (s *Service) Remove(ctx context.Context, actor keys.Actor, owner, name string) (err error) {
	e := s.entry(actor, "account.rm", owner+"/"+name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, owner); err != nil {
		return err
	}
	if err := ValidName(name); err != nil {
		return err
	}
	return s.store.DeleteAccount(ctx, owner, name, e)
}

// SetDefault makes name owner's default account, tried first by ForRepo.
func (s *Service) SetDefault(ctx context.Context, actor keys.Actor, owner, name string) (err error) {
	e := s.entry(actor, "account.default", owner+"/"+name)
	defer func() { s.finish(ctx, e, err) }()
	if err := s.authorize(ctx, actor, owner); err != nil {
		return err
	}
	if err := ValidName(name); err != nil {
		return err
	}
	return s.store.SetDefaultAccount(ctx, owner, name, e)
}

// List returns owner's accounts (masked), the default first.
func (s *Service) List(ctx context.Context, actor keys.Actor, owner string) ([]Account, error) {
	if err := s.authorize(ctx, actor, owner); err != nil {
		return nil, err
	}
	recs, err := s.store.ListAccounts(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := make([]Account, len(recs))
	for i, r := range recs {
		out[i] = r.Account
	}
	return out, nil
}

// Token returns one of owner's accounts with its token, for the core. It
// fails for an account of another host than the configured one.
func (s *Service) Token(ctx context.Context, owner, name string) (Account, string, error) {
	recs, err := s.store.ListAccounts(ctx, owner)
	if err != nil {
		return Account{}, "", err
	}
	for _, r := range recs {
		if r.Name == name {
			if r.Host != s.host.String() {
				return Account{}, "", fmt.Errorf("account %q is for %s, not %s: %w", name, r.Host, s.host, keys.ErrInvalid)
			}
			tok, err := s.open(r)
			return r.Account, tok, err
		}
	}
	return Account{}, "", fmt.Errorf("GitHub account %q of %q: %w", name, owner, keys.ErrNotFound)
}

// Secrets returns every token owner's accounts hold, whatever their host,
// for the redactor's list of known secrets (and for nothing else).
func (s *Service) Secrets(ctx context.Context, owner string) ([]string, error) {
	recs, err := s.store.ListAccounts(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range recs {
		tok, err := s.open(r)
		if err != nil {
			return nil, err
		}
		out = append(out, tok)
	}
	return out, nil
}

func (s *Service) open(r Record) (string, error) {
	pt, err := s.sealer.Open(r.Sealed, aad(r.OwnerID, r.Name))
	if err != nil {
		return "", fmt.Errorf("open token of account %q of %q: %w", r.Name, r.Owner, err)
	}
	return string(pt), nil
}

// ForRepo picks the account of owner that can reach repo: the default
// first, then the others by name, probing each against the host. It returns
// the account and its token. With none, the error is ErrNoAccount and says
// what each account got.
func (s *Service) ForRepo(ctx context.Context, owner string, repo Repo) (Account, string, error) {
	if _, err := ParseRepo(repo.String()); err != nil {
		return Account{}, "", err
	}
	recs, err := s.store.ListAccounts(ctx, owner)
	if err != nil {
		return Account{}, "", err
	}
	var tried []string
	for _, r := range recs {
		if r.Host != s.host.String() {
			continue // never send a token to another host
		}
		tok, err := s.open(r)
		if err != nil {
			tried = append(tried, r.Name+": "+err.Error())
			continue
		}
		err = s.Probe(ctx, repo, tok)
		if err == nil {
			return r.Account, tok, nil
		}
		if ctx.Err() != nil {
			return Account{}, "", ctx.Err()
		}
		tried = append(tried, r.Name+": "+reason(err))
	}
	if len(tried) == 0 {
		return Account{}, "", fmt.Errorf("%s: user %q has no account on %s: %w", repo, owner, s.host, ErrNoAccount)
	}
	return Account{}, "", fmt.Errorf("%s (%s): %w", repo, strings.Join(tried, "; "), ErrNoAccount)
}

func reason(err error) string {
	switch {
	case errors.Is(err, ErrTokenRejected):
		return ErrTokenRejected.Error()
	case errors.Is(err, ErrUnreachable):
		return ErrUnreachable.Error()
	}
	return err.Error()
}

// GitEnv returns environment entries that make a git client send token to
// the configured host only (git's http.<url>.extraHeader, matched by URL
// prefix), for cloning and fetching on the gateway host. Unlike a token in
// the remote URL or in `git -c` arguments, this leaves nothing in the
// clone's .git/config and nothing in the process's argument list. It uses
// GIT_CONFIG_COUNT, so the caller must not set GIT_CONFIG_COUNT itself.
func (s *Service) GitEnv(token string) []string {
	cred := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	return []string{
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=http." + s.host.String() + "/.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic " + cred,
		"GIT_TERMINAL_PROMPT=0",
	}
}
