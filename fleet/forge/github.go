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
	// githubMaxBody bounds one answer read (a page of 100 repositories is
	// about 600 KB).
	githubMaxBody = 8 << 20
	// githubPerPage is GitHub's largest page.
	githubPerPage = 100
	// githubMaxPages bounds the pages one list follows (reviews, check
	// runs, repositories): 10 pages of 100.
	githubMaxPages = 10
	// maxRepos is the most repositories Repos answers with.
	maxRepos = githubPerPage * githubMaxPages
	// Bounds GitHub itself sets on a pull request's title and body.
	maxTitle = 256
	maxBody  = 65536
	// maxHostText bounds a host's words (an error message, a check's
	// description) carried into an error or a card.
	maxHostText = 300
)

var (
	// ownerChars and repoChars: GitHub's owner (user or organization) and
	// repository names; they are put into URL paths, which go-github does
	// not escape.
	ownerChars = charset.New("A-Za-z0-9_.-")
	repoChars  = charset.New("A-Za-z0-9_.-")
	hexChars   = charset.New("0-9a-f")
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
		return nil, fmt.Errorf("github forge: base %q: want an http(s) address with a host and no user, query or fragment: %w", redactURL(base), errkind.Invalid)
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

func redactURL(u *url.URL) string {
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
	resp.Body = limitedBody{Reader: io.LimitReader(resp.Body, githubMaxBody), Closer: resp.Body}
	return resp, nil
}

type limitedBody struct {
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

func checkRepo(r Repo) error {
	if !charset.Is(r.Owner, 1, 100, ownerChars, ownerChars) || !charset.Is(r.Name, 1, 100, repoChars, repoChars) ||
		r.Owner == "." || r.Owner == ".." || r.Name == "." || r.Name == ".." {
		return fmt.Errorf("repository %q: want owner/name of letters, digits, '.', '_' and '-': %w", clip(r.String()), errkind.Invalid)
	}
	return nil
}

func checkNumber(n int) error {
	if n <= 0 {
		return fmt.Errorf("pull request number %d: want a positive number: %w", n, errkind.Invalid)
	}
	return nil
}

// checkBranch accepts what git accepts as a branch name, less what needs
// quoting in a URL query or GitHub's owner:branch head.
func checkBranch(what, b string) error {
	bad := b == "" || len(b) > 255 || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{")
	for _, r := range b {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(":~^?*[\\", r) {
			bad = true
		}
	}
	if bad || !utf8.ValidString(b) {
		return fmt.Errorf("%s branch %q: not a branch name: %w", what, clip(b), errkind.Invalid)
	}
	return nil
}

func checkSHA(sha string) error {
	if sha != "" && !charset.Is(sha, 40, 40, hexChars, hexChars) && !charset.Is(sha, 64, 64, hexChars, hexChars) {
		return fmt.Errorf("head sha %q: want 40 or 64 lowercase hex digits: %w", clip(sha), errkind.Invalid)
	}
	return nil
}

func (g *githubForge) Open(ctx context.Context, token string, req OpenRequest) (PullRequest, bool, error) {
	if err := checkRepo(req.Repo); err != nil {
		return PullRequest{}, false, fmt.Errorf("open a pull request: %w", err)
	}
	if err := checkBranch("head", req.Head); err != nil {
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: %w", req.Repo, err)
	}
	if req.Base != "" {
		if err := checkBranch("base", req.Base); err != nil {
			return PullRequest{}, false, fmt.Errorf("open a pull request on %s: %w", req.Repo, err)
		}
	}
	title := strings.TrimSpace(req.Title)
	switch {
	case title == "" || !utf8.ValidString(title) || utf8.RuneCountInString(title) > maxTitle:
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: title: want 1 to %d characters of UTF-8: %w", req.Repo, maxTitle, errkind.Invalid)
	case !utf8.ValidString(req.Body) || utf8.RuneCountInString(req.Body) > maxBody:
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: body: want at most %d characters of UTF-8: %w", req.Repo, maxBody, errkind.Invalid)
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
		if checkBranch("default", base) != nil {
			return PullRequest{}, false, fmt.Errorf("%s: the host names no usable default branch (%q); give a base: %w", what, clip(base), errkind.Invalid)
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
	if err := checkRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("get a pull request: %w", err)
	}
	if err := checkNumber(number); err != nil {
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
	pr := pullRequestFromGitHub(repo, p)

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
	pr.Review = reviewFromGitHub(reviews)

	pr.Checks = []Check{}
	if checkSHA(pr.HeadSHA) != nil || pr.HeadSHA == "" {
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
	pr.Checks = checksFromGitHub(runs, status)
	return pr, nil
}

func (g *githubForge) Merge(ctx context.Context, token string, repo Repo, number int, method MergeMethod, sha string) (PullRequest, error) {
	if err := checkRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("merge a pull request: %w", err)
	}
	if err := checkNumber(number); err != nil {
		return PullRequest{}, fmt.Errorf("merge a pull request on %s: %w", repo, err)
	}
	switch method {
	case "":
		method = Merge
	case Merge, Squash, Rebase:
	default:
		return PullRequest{}, fmt.Errorf("merge %s#%d: method %q: want merge, squash or rebase: %w", repo, number, clip(string(method)), errkind.Invalid)
	}
	if err := checkSHA(sha); err != nil {
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
	if err := checkRepo(repo); err != nil {
		return PullRequest{}, fmt.Errorf("close a pull request: %w", err)
	}
	if err := checkNumber(number); err != nil {
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
	if limit < 1 || limit > maxRepos {
		return nil, fmt.Errorf("list repositories: limit %d: want 1 to %d: %w", limit, maxRepos, errkind.Invalid)
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
			info, ok := repoInfoFromGitHub(r)
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

// pullRequestFromGitHub maps GitHub's pull request onto the card (no
// checks or review: those take calls of their own).
func pullRequestFromGitHub(repo Repo, p *github.PullRequest) PullRequest {
	pr := PullRequest{
		Repo:      repo,
		Number:    p.GetNumber(),
		URL:       webURL(p.GetHTMLURL()),
		Title:     clipN(p.GetTitle(), maxTitle),
		Body:      clipN(p.GetBody(), maxBody),
		State:     StateClosed,
		Draft:     p.GetDraft(),
		Head:      clipN(p.GetHead().GetRef(), 255),
		Base:      clipN(p.GetBase().GetRef(), 255),
		Mergeable: MergeableUnknown,
		Review:    ReviewNone,
		Checks:    []Check{},
		Author:    clipN(p.GetUser().GetLogin(), 100),
		Created:   p.GetCreatedAt().Time,
		Updated:   p.GetUpdatedAt().Time,
	}
	if sha := p.GetHead().GetSHA(); checkSHA(sha) == nil {
		pr.HeadSHA = sha
	}
	switch {
	// merged says it; merged_at is the word of answers without it.
	case p.GetMerged() || (p.Merged == nil && p.MergedAt != nil):
		pr.State = StateMerged
		pr.MergedAt = p.GetMergedAt().Time
		// Before the merge, merge_commit_sha is GitHub's test merge.
		if sha := p.GetMergeCommitSHA(); checkSHA(sha) == nil {
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

// reviewFromGitHub is the verdict of the latest review of each reviewer
// that counts: an approval or a request for changes stands until the same
// reviewer gives another or it is dismissed; a comment changes nothing.
// Any standing request for changes wins over approvals.
func reviewFromGitHub(reviews []*github.PullRequestReview) string {
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

// checksFromGitHub lists check runs, then commit statuses.
func checksFromGitHub(runs []*github.CheckRun, status *github.CombinedStatus) []Check {
	checks := []Check{}
	for _, r := range runs {
		if r == nil {
			continue
		}
		word := r.GetStatus()
		outcome := CheckPending
		if word == "completed" {
			word = r.GetConclusion()
			outcome = checkRunOutcome(word)
		}
		c := Check{Name: clipN(r.GetName(), 100), Outcome: outcome, Detail: detail(word, r.GetOutput().GetTitle()), URL: webURL(r.GetHTMLURL())}
		if c.URL == "" {
			c.URL = webURL(r.GetDetailsURL())
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
			Name:    clipN(s.GetContext(), 100),
			Outcome: statusOutcome(s.GetState()),
			Detail:  detail(s.GetState(), s.GetDescription()),
			URL:     webURL(s.GetTargetURL()),
		})
	}
	return checks
}

// checkRunOutcome maps a completed check run's conclusion; a word GitHub
// may add later never reads as passing.
func checkRunOutcome(conclusion string) string {
	switch conclusion {
	case "success":
		return CheckSuccess
	case "neutral", "skipped", "stale":
		return CheckNeutral
	}
	return CheckFailure // failure, timed_out, cancelled, action_required, startup_failure
}

// statusOutcome maps a commit status's state.
func statusOutcome(state string) string {
	switch state {
	case "pending":
		return CheckPending
	case "success":
		return CheckSuccess
	}
	return CheckFailure // failure, error
}

func detail(word, description string) string {
	word, description = clip(word), clip(description)
	if description == "" {
		return word
	}
	return word + ": " + description
}

func repoInfoFromGitHub(r *github.Repository) (RepoInfo, bool) {
	info := RepoInfo{
		Repo:          Repo{Owner: r.GetOwner().GetLogin(), Name: r.GetName()},
		Description:   clip(r.GetDescription()),
		Private:       r.GetPrivate(),
		DefaultBranch: r.GetDefaultBranch(),
		URL:           webURL(r.GetHTMLURL()),
		Updated:       r.GetUpdatedAt().Time,
	}
	if checkRepo(info.Repo) != nil {
		return RepoInfo{}, false
	}
	if checkBranch("default", info.DefaultBranch) != nil {
		info.DefaultBranch = "" // an empty repository has none
	}
	return info, true
}

// webURL keeps an http(s) address a page may link to; anything else is "".
func webURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || len(s) > 2048 {
		return ""
	}
	return u.String()
}

// clip bounds a host's words: valid UTF-8, no control characters, at most
// maxHostText characters.
func clip(s string) string { return clipN(s, maxHostText) }

func clipN(s string, n int) string {
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
		return clip(s)
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
