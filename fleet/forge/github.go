package forge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/go-github/v84/github"

	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/errkind"
)

// GitHub's REST API, as sbx uses it (docs.github.com/en/rest; the contract
// test in github_test.go plays the documented answers):
//
//	GET   /repos/{o}/{r}/pulls?state=open&head=O:BRANCH  an open PR from a head
//	GET   /repos/{o}/{r}                                 default_branch
//	POST  /repos/{o}/{r}/pulls                           open one
//	GET   /repos/{o}/{r}/pulls/{n}                       the card
//	GET   /repos/{o}/{r}/pulls/{n}/reviews               the review verdict
//	GET   /repos/{o}/{r}/commits/{sha}/check-runs        checks (Actions, apps)
//	GET   /repos/{o}/{r}/commits/{sha}/status            checks (commit statuses)
//	PUT   /repos/{o}/{r}/pulls/{n}/merge                 merge
//	PATCH /repos/{o}/{r}/pulls/{n}                       close
//	GET   /user/repos?sort=updated                       the token's repositories

const (
	// githubAccept is the media type GitHub's docs ask every REST call for.
	githubAccept = "application/vnd.github+json"
	// githubTimeout bounds a call when the caller gives no http.Client.
	githubTimeout = 30 * time.Second
	// githubMaxAnswer bounds one answer read (a page of 100 repositories is
	// about 600 KB).
	githubMaxAnswer = 8 << 20
	// githubPerPage is GitHub's largest page.
	githubPerPage = 100
	// githubMaxPages bounds the pages one list follows (reviews, check
	// runs, repositories): 10 pages of 100.
	githubMaxPages = 10
	// githubMaxRepos is the most repositories Repos answers with.
	githubMaxRepos = githubPerPage * githubMaxPages
	// Bounds GitHub itself sets on a pull request's title and body.
	githubMaxTitle  = 256
	githubMaxPRBody = 65536
	// githubMaxHostText bounds a host's words (an error message, a check's
	// description) carried into an error or a card.
	githubMaxHostText = 300
)

var (
	// githubOwnerChars and githubRepoChars: GitHub's owner (user or organization) and
	// repository names; they are put into URL paths, which go-github does
	// not escape.
	githubOwnerChars = charset.New("A-Za-z0-9_.-")
	githubRepoChars  = charset.New("A-Za-z0-9_.-")
	githubHexChars   = charset.New("0-9a-f")
)

type githubForge struct {
	client *github.Client // no token: each call takes a copy with one
}

// NewGitHub is the Forge of github.com or the GitHub Enterprise Server at
// base (the web address people clone from): its API is api.github.com or
// base/api/v3 (APIBase). Calls go through client (nil: one with a 30s
// timeout), with redirects never followed: a token is not sent on to where
// a redirect points.
func NewGitHub(base *url.URL, client *http.Client) (Forge, error) {
	if base == nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" || base.User != nil || base.RawQuery != "" || base.Fragment != "" {
		return nil, fmt.Errorf("github forge: base %q: want an http(s) address with a host and no user, query or fragment: %w", githubRedactURL(base), errkind.Invalid)
	}
	hc := &http.Client{Timeout: githubTimeout}
	if client != nil {
		c := *client
		hc = &c
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Transport = githubTransport{next: hc.Transport}
	c := github.NewClient(hc)
	c.UserAgent = "sbx"
	api := APIBase(GitHub, base)
	if api != "https://api.github.com" {
		var err error
		if c, err = c.WithEnterpriseURLs(api+"/", strings.TrimSuffix(base.String(), "/")+"/api/uploads/"); err != nil {
			return nil, fmt.Errorf("github forge: base %q: %w: %w", base, errkind.Invalid, err)
		}
	}
	return &githubForge{client: c}, nil
}

func githubRedactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Redacted()
}

// githubTransport asks for GitHub's documented media type and bounds what
// is read of an answer.
type githubTransport struct{ next http.RoundTripper }

func (t githubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	req = req.Clone(req.Context())
	req.Header.Set("Accept", githubAccept)
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = githubLimitedBody{Reader: io.LimitReader(resp.Body, githubMaxAnswer), Closer: resp.Body}
	return resp, nil
}

type githubLimitedBody struct {
	io.Reader
	io.Closer
}

func (*githubForge) Kind() Kind { return GitHub }

// call is one operation's client, acting with token.
func (g *githubForge) call(token string) (*github.Client, error) {
	if token == "" {
		return nil, fmt.Errorf("github: no token: %w", errkind.Invalid)
	}
	for i := 0; i < len(token); i++ {
		// A header carries visible ASCII only; the token is never quoted.
		if token[i] <= ' ' || token[i] >= 0x7f {
			return nil, fmt.Errorf("github: the token holds a character a header cannot carry: %w", errkind.Invalid)
		}
	}
	return g.client.WithAuthToken(token), nil
}

func githubCheckRepo(r Repo) error {
	if !charset.Is(r.Owner, 1, 100, githubOwnerChars, githubOwnerChars) || !charset.Is(r.Name, 1, 100, githubRepoChars, githubRepoChars) ||
		r.Owner == "." || r.Owner == ".." || r.Name == "." || r.Name == ".." {
		return fmt.Errorf("repository %q: want owner/name of letters, digits, '.', '_' and '-': %w", githubClip(r.String()), errkind.Invalid)
	}
	return nil
}

func githubCheckNumber(n int) error {
	if n <= 0 {
		return fmt.Errorf("pull request number %d: want a positive number: %w", n, errkind.Invalid)
	}
	return nil
}

// githubCheckBranch accepts what git accepts as a branch name, less what needs
// quoting in a URL query or GitHub's owner:branch head.
func githubCheckBranch(what, b string) error {
	bad := b == "" || len(b) > 255 || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{")
	for _, r := range b {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(":~^?*[\\", r) {
			bad = true
		}
	}
	if bad || !utf8.ValidString(b) {
		return fmt.Errorf("%s branch %q: not a branch name: %w", what, githubClip(b), errkind.Invalid)
	}
	return nil
}

func githubCheckSHA(sha string) error {
	if sha != "" && !charset.Is(sha, 40, 40, githubHexChars, githubHexChars) && !charset.Is(sha, 64, 64, githubHexChars, githubHexChars) {
		return fmt.Errorf("head sha %q: want 40 or 64 lowercase hex digits: %w", githubClip(sha), errkind.Invalid)
	}
	return nil
}

func (g *githubForge) Open(ctx context.Context, token string, req OpenRequest) (PullRequest, bool, error) {
	if err := githubCheckRepo(req.Repo); err != nil {
		return PullRequest{}, false, fmt.Errorf("open a pull request: %w", err)
	}
	if err := githubCheckBranch("head", req.Head); err != nil {
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: %w", req.Repo, err)
	}
	if req.Base != "" {
		if err := githubCheckBranch("base", req.Base); err != nil {
			return PullRequest{}, false, fmt.Errorf("open a pull request on %s: %w", req.Repo, err)
		}
	}
	title := strings.TrimSpace(req.Title)
	switch {
	case title == "" || !utf8.ValidString(title) || utf8.RuneCountInString(title) > githubMaxTitle:
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: title: want 1 to %d characters of UTF-8: %w", req.Repo, githubMaxTitle, errkind.Invalid)
	case !utf8.ValidString(req.Body) || utf8.RuneCountInString(req.Body) > githubMaxPRBody:
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: body: want at most %d characters of UTF-8: %w", req.Repo, githubMaxPRBody, errkind.Invalid)
	}
	c, err := g.call(token)
	if err != nil {
		return PullRequest{}, false, err
	}
	o, r := req.Repo.Owner, req.Repo.Name
	what := "open a pull request from " + req.Head + " on " + req.Repo.String()

	// One open pull request per head: a retry finds the one it opened.
	open, _, err := c.PullRequests.List(ctx, o, r, &github.PullRequestListOptions{State: "open", Head: o + ":" + req.Head})
	if err != nil {
		return PullRequest{}, false, githubError(ctx, what, token, err)
	}
	for _, p := range open {
		if p.GetNumber() > 0 {
			pr, err := g.get(ctx, c, token, req.Repo, p.GetNumber())
			return pr, false, err
		}
	}

	base := req.Base
	if base == "" {
		repo, _, err := c.Repositories.Get(ctx, o, r)
		if err != nil {
			return PullRequest{}, false, githubError(ctx, what, token, err)
		}
		base = repo.GetDefaultBranch()
		if githubCheckBranch("default", base) != nil {
			return PullRequest{}, false, fmt.Errorf("%s: the host names no usable default branch (%q); give a base: %w", what, githubClip(base), errkind.Invalid)
		}
	}
	created, _, err := c.PullRequests.Create(ctx, o, r, &github.NewPullRequest{
		Title: &title,
		Head:  &req.Head,
		Base:  &base,
		Body:  &req.Body,
		Draft: &req.Draft,
	})
	if err != nil {
		return PullRequest{}, false, githubError(ctx, what, token, err)
	}
	if created.GetNumber() <= 0 {
		return PullRequest{}, false, fmt.Errorf("%s: the host's answer names no pull request: %w", what, errkind.Unavailable)
	}
	pr, err := g.get(ctx, c, token, req.Repo, created.GetNumber())
	return pr, true, err
}

func (g *githubForge) Get(ctx context.Context, token string, repo Repo, number int) (PullRequest, error) {
	if err := githubCheckRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("get a pull request: %w", err)
	}
	if err := githubCheckNumber(number); err != nil {
		return PullRequest{}, fmt.Errorf("get a pull request on %s: %w", repo, err)
	}
	c, err := g.call(token)
	if err != nil {
		return PullRequest{}, err
	}
	return g.get(ctx, c, token, repo, number)
}

// get is the card: the pull request, its reviews and the checks of its head.
func (g *githubForge) get(ctx context.Context, c *github.Client, token string, repo Repo, number int) (PullRequest, error) {
	what := fmt.Sprintf("pull request %s#%d", repo, number)
	p, _, err := c.PullRequests.Get(ctx, repo.Owner, repo.Name, number)
	if err != nil {
		return PullRequest{}, githubError(ctx, what, token, err)
	}
	pr := githubPullRequest(repo, p)

	var reviews []*github.PullRequestReview
	opt := &github.ListOptions{PerPage: githubPerPage}
	for range githubMaxPages {
		page, resp, err := c.PullRequests.ListReviews(ctx, repo.Owner, repo.Name, number, opt)
		if err != nil {
			return PullRequest{}, githubError(ctx, what+": reviews", token, err)
		}
		reviews = append(reviews, page...)
		if resp.NextPage <= opt.Page {
			break
		}
		opt.Page = resp.NextPage
	}
	pr.Review = githubReview(reviews)

	pr.Checks = []Check{}
	if pr.HeadSHA == "" { // none, or not a sha
		return pr, nil
	}
	var runs []*github.CheckRun
	ropt := &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: githubPerPage}}
	for range githubMaxPages {
		page, resp, err := c.Checks.ListCheckRunsForRef(ctx, repo.Owner, repo.Name, pr.HeadSHA, ropt)
		if err != nil {
			return PullRequest{}, githubError(ctx, what+": check runs", token, err)
		}
		runs = append(runs, page.CheckRuns...)
		if resp.NextPage <= ropt.Page {
			break
		}
		ropt.Page = resp.NextPage
	}
	status, _, err := c.Repositories.GetCombinedStatus(ctx, repo.Owner, repo.Name, pr.HeadSHA, &github.ListOptions{PerPage: githubPerPage})
	if err != nil {
		return PullRequest{}, githubError(ctx, what+": commit status", token, err)
	}
	pr.Checks = githubChecks(runs, status)
	return pr, nil
}

func (g *githubForge) Merge(ctx context.Context, token string, repo Repo, number int, method MergeMethod, sha string) (PullRequest, error) {
	if err := githubCheckRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("merge a pull request: %w", err)
	}
	if err := githubCheckNumber(number); err != nil {
		return PullRequest{}, fmt.Errorf("merge a pull request on %s: %w", repo, err)
	}
	switch method {
	case "":
		method = Merge
	case Merge, Squash, Rebase:
	default:
		return PullRequest{}, fmt.Errorf("merge %s#%d: method %q: want merge, squash or rebase: %w", repo, number, githubClip(string(method)), errkind.Invalid)
	}
	if err := githubCheckSHA(sha); err != nil {
		return PullRequest{}, fmt.Errorf("merge %s#%d: %w", repo, number, err)
	}
	c, err := g.call(token)
	if err != nil {
		return PullRequest{}, err
	}
	what := fmt.Sprintf("merge %s#%d", repo, number)
	if _, _, err := c.PullRequests.Merge(ctx, repo.Owner, repo.Name, number, "", &github.PullRequestOptions{MergeMethod: string(method), SHA: sha}); err != nil {
		return PullRequest{}, githubError(ctx, what, token, err)
	}
	return g.get(ctx, c, token, repo, number)
}

func (g *githubForge) Close(ctx context.Context, token string, repo Repo, number int) (PullRequest, error) {
	if err := githubCheckRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("close a pull request: %w", err)
	}
	if err := githubCheckNumber(number); err != nil {
		return PullRequest{}, fmt.Errorf("close a pull request on %s: %w", repo, err)
	}
	c, err := g.call(token)
	if err != nil {
		return PullRequest{}, err
	}
	closed := "closed"
	if _, _, err := c.PullRequests.Edit(ctx, repo.Owner, repo.Name, number, &github.PullRequest{State: &closed}); err != nil {
		return PullRequest{}, githubError(ctx, fmt.Sprintf("close %s#%d", repo, number), token, err)
	}
	return g.get(ctx, c, token, repo, number)
}

func (g *githubForge) Repos(ctx context.Context, token, query string, limit int) ([]RepoInfo, error) {
	if limit < 1 || limit > githubMaxRepos {
		return nil, fmt.Errorf("list repositories: limit %d: want 1 to %d: %w", limit, githubMaxRepos, errkind.Invalid)
	}
	if len(query) > 200 || !utf8.ValidString(query) {
		return nil, fmt.Errorf("list repositories: query: want at most 200 bytes of UTF-8: %w", errkind.Invalid)
	}
	c, err := g.call(token)
	if err != nil {
		return nil, err
	}
	q := strings.ToLower(strings.TrimSpace(query))
	out := []RepoInfo{}
	opt := &github.RepositoryListByAuthenticatedUserOptions{Sort: "updated", ListOptions: github.ListOptions{PerPage: githubPerPage}}
	for range githubMaxPages {
		page, resp, err := c.Repositories.ListByAuthenticatedUser(ctx, opt)
		if err != nil {
			return nil, githubError(ctx, "list repositories", token, err)
		}
		for _, r := range page {
			info, ok := githubRepoInfo(r)
			if !ok || !strings.Contains(strings.ToLower(info.Repo.String()), q) {
				continue
			}
			out = append(out, info)
			if len(out) == limit {
				return out, nil
			}
		}
		if resp.NextPage <= opt.Page {
			break
		}
		opt.Page = resp.NextPage
	}
	return out, nil
}

// githubPullRequest maps GitHub's pull request onto the card (no
// checks or review: those take calls of their own).
func githubPullRequest(repo Repo, p *github.PullRequest) PullRequest {
	pr := PullRequest{
		Repo:      repo,
		Number:    p.GetNumber(),
		URL:       githubWebURL(p.GetHTMLURL()),
		Title:     githubClipN(p.GetTitle(), githubMaxTitle),
		Body:      githubClipN(p.GetBody(), githubMaxPRBody),
		State:     StateClosed,
		Draft:     p.GetDraft(),
		Head:      githubClipN(p.GetHead().GetRef(), 255),
		Base:      githubClipN(p.GetBase().GetRef(), 255),
		Mergeable: MergeableUnknown,
		Review:    ReviewNone,
		Checks:    []Check{},
		Author:    githubClipN(p.GetUser().GetLogin(), 100),
		Created:   p.GetCreatedAt().Time,
		Updated:   p.GetUpdatedAt().Time,
	}
	if sha := p.GetHead().GetSHA(); githubCheckSHA(sha) == nil {
		pr.HeadSHA = sha
	}
	switch {
	// merged says it; merged_at is the word of answers without it.
	case p.GetMerged() || (p.Merged == nil && p.MergedAt != nil):
		pr.State = StateMerged
		pr.MergedAt = p.GetMergedAt().Time
		// Before the merge, merge_commit_sha is GitHub's test merge.
		if sha := p.GetMergeCommitSHA(); githubCheckSHA(sha) == nil {
			pr.MergeSHA = sha
		}
	case p.GetState() == StateOpen:
		pr.State = StateOpen
	}
	switch {
	case p.Mergeable == nil || p.GetMergeableState() == "unknown":
		// null: GitHub is still computing it.
	case p.GetMergeableState() == "dirty" || !*p.Mergeable:
		pr.Mergeable = MergeableConflict
	default:
		pr.Mergeable = MergeableYes
	}
	return pr
}

// githubReview is the verdict of the latest review of each reviewer
// that counts: an approval or a request for changes stands until the same
// reviewer gives another or it is dismissed; a comment changes nothing.
// Any standing request for changes wins over approvals.
func githubReview(reviews []*github.PullRequestReview) string {
	verdicts := map[string]string{}
	for _, r := range reviews {
		who := r.GetUser().GetLogin()
		switch r.GetState() {
		case "APPROVED":
			verdicts[who] = ReviewApproved
		case "CHANGES_REQUESTED":
			verdicts[who] = ReviewChangesRequested
		case "DISMISSED":
			delete(verdicts, who)
		}
	}
	out := ReviewNone
	for _, v := range verdicts {
		if v == ReviewChangesRequested {
			return ReviewChangesRequested
		}
		out = ReviewApproved
	}
	return out
}

// githubChecks lists check runs, then commit statuses.
func githubChecks(runs []*github.CheckRun, status *github.CombinedStatus) []Check {
	checks := []Check{}
	for _, r := range runs {
		if r == nil {
			continue
		}
		word := r.GetStatus()
		outcome := CheckPending
		if word == "completed" {
			word = r.GetConclusion()
			outcome = githubCheckRunOutcome(word)
		}
		c := Check{Name: githubClipN(r.GetName(), 100), Outcome: outcome, Detail: githubDetail(word, r.GetOutput().GetTitle()), URL: githubWebURL(r.GetHTMLURL())}
		if c.URL == "" {
			c.URL = githubWebURL(r.GetDetailsURL())
		}
		checks = append(checks, c)
	}
	if status == nil {
		return checks
	}
	for _, s := range status.Statuses {
		if s == nil {
			continue
		}
		checks = append(checks, Check{
			Name:    githubClipN(s.GetContext(), 100),
			Outcome: githubStatusOutcome(s.GetState()),
			Detail:  githubDetail(s.GetState(), s.GetDescription()),
			URL:     githubWebURL(s.GetTargetURL()),
		})
	}
	return checks
}

// githubCheckRunOutcome maps a completed check run's conclusion; a word GitHub
// may add later never reads as passing.
func githubCheckRunOutcome(conclusion string) string {
	switch conclusion {
	case "success":
		return CheckSuccess
	case "neutral", "skipped", "stale":
		return CheckNeutral
	}
	return CheckFailure // failure, timed_out, cancelled, action_required, startup_failure
}

// githubStatusOutcome maps a commit status's state.
func githubStatusOutcome(state string) string {
	switch state {
	case "pending":
		return CheckPending
	case "success":
		return CheckSuccess
	}
	return CheckFailure // failure, error
}

func githubDetail(word, description string) string {
	word, description = githubClip(word), githubClip(description)
	if description == "" {
		return word
	}
	return word + ": " + description
}

func githubRepoInfo(r *github.Repository) (RepoInfo, bool) {
	info := RepoInfo{
		Repo:          Repo{Owner: r.GetOwner().GetLogin(), Name: r.GetName()},
		Description:   githubClip(r.GetDescription()),
		Private:       r.GetPrivate(),
		DefaultBranch: r.GetDefaultBranch(),
		URL:           githubWebURL(r.GetHTMLURL()),
		Updated:       r.GetUpdatedAt().Time,
	}
	if githubCheckRepo(info.Repo) != nil {
		return RepoInfo{}, false
	}
	if githubCheckBranch("default", info.DefaultBranch) != nil {
		info.DefaultBranch = "" // an empty repository has none
	}
	return info, true
}

// githubWebURL keeps an http(s) address a page may link to; anything else is "".
func githubWebURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || len(s) > 2048 {
		return ""
	}
	return u.String()
}

// githubClip bounds a host's words: valid UTF-8, no control characters, at most
// githubMaxHostText characters.
func githubClip(s string) string { return githubClipN(s, githubMaxHostText) }

func githubClipN(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i == n {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			r = '\uFFFD'
		}
		b.WriteRune(r)
		i++
	}
	return b.String()
}

// githubError gives a failed call its errkind and a message that says what
// GitHub said. The message is built from parts (never by wrapping the
// client's error, whose text is GitHub's) and holds no token.
func githubError(ctx context.Context, what, token string, err error) error {
	scrub := func(s string) string {
		if token != "" {
			s = strings.ReplaceAll(s, token, "[token]")
		}
		return githubClip(s)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("github: %s: %w: %w", what, errkind.Unavailable, ctx.Err())
	}
	var (
		rate     *github.RateLimitError
		abuse    *github.AbuseRateLimitError
		redirect *github.RedirectionError
		accepted *github.AcceptedError
		twoFA    *github.TwoFactorAuthError
		resp     *github.ErrorResponse
	)
	switch {
	case errors.As(err, &rate):
		return fmt.Errorf("github: %s: rate limited (%s); it resets at %s (in %s): %w", what, scrub(rate.Message),
			rate.Rate.Reset.UTC().Format(time.DateTime+" UTC"), time.Until(rate.Rate.Reset.Time).Round(time.Second), errkind.Unavailable)
	case errors.As(err, &abuse):
		after := "later"
		if abuse.RetryAfter != nil {
			after = "in " + abuse.RetryAfter.Round(time.Second).String()
		}
		return fmt.Errorf("github: %s: secondary rate limit (%s); retry %s: %w", what, scrub(abuse.Message), after, errkind.Unavailable)
	case errors.As(err, &redirect):
		loc := ""
		if redirect.Location != nil {
			loc = redirect.Location.Redacted()
		}
		return fmt.Errorf("github: %s: the host answered %d with a redirect to %q, not followed with a token: %w", what, redirect.StatusCode, scrub(loc), errkind.Unavailable)
	case errors.As(err, &accepted):
		return fmt.Errorf("github: %s: the host is still working on it; retry shortly: %w", what, errkind.Unavailable)
	case errors.As(err, &twoFA):
		return fmt.Errorf("github: %s: token rejected by the git host (it asks for a one-time password): %w", what, errkind.Invalid)
	case errors.As(err, &resp):
		code := 0
		if resp.Response != nil {
			code = resp.Response.StatusCode
		}
		msg := resp.Message
		for _, e := range resp.Errors {
			switch {
			case e.Message != "":
				msg += "; " + e.Message
			case e.Code != "":
				msg += fmt.Sprintf("; %s %s: %s", e.Resource, e.Field, e.Code)
			}
		}
		msg = scrub(msg)
		if msg == "" {
			msg = http.StatusText(code)
		}
		switch {
		case code == http.StatusUnauthorized:
			return fmt.Errorf("github: %s: token rejected by the git host (%s): %w", what, msg, errkind.Invalid)
		case code == http.StatusForbidden:
			return fmt.Errorf("github: %s: the token may not do this (%s): %w", what, msg, errkind.Forbidden)
		case code == http.StatusNotFound:
			return fmt.Errorf("github: %s: not found, or the token cannot see it (%s): %w", what, msg, errkind.NotFound)
		case code == http.StatusMethodNotAllowed || code == http.StatusConflict:
			return fmt.Errorf("github: %s: %s: %w", what, msg, errkind.Conflict)
		case code == http.StatusTooManyRequests || code >= 500 || code == 0:
			return fmt.Errorf("github: %s: the host failed (%d %s); retry later: %w", what, code, msg, errkind.Unavailable)
		}
		return fmt.Errorf("github: %s: the host refused it (%d %s): %w", what, code, msg, errkind.Invalid)
	}
	// The host could not be reached, or answered what is not JSON.
	return fmt.Errorf("github: %s: %s: %w", what, scrub(err.Error()), errkind.Unavailable)
}
