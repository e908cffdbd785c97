package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"sbx.dev/sbx/internal/errkind"
)

// giteaForge speaks Gitea's (and Forgejo's) REST API v1.
type giteaForge struct {
	api    string // base/api/v1, no trailing slash
	client *http.Client
	// mergeWait bounds Merge's retries while Gitea is checking (a field
	// so a test can shorten it).
	mergeWait time.Duration
}

// NewGitea is the Forge of the Gitea or Forgejo at base (the web address
// people clone from). client's timeouts bound every call (nil: a client
// with a 30s timeout); redirects are never followed, since every request
// carries a token.
func NewGitea(base *url.URL, client *http.Client) Forge {
	c := http.Client{Timeout: 30 * time.Second}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &giteaForge{api: APIBase(Gitea, base), client: &c, mergeWait: giteaMergeCheckingWait}
}

func (g *giteaForge) Kind() Kind { return Gitea }

// Bounds on what is read from the host: an answer body, the host's
// message quoted in an error, and how many pages a search reads.
const (
	giteaMaxAnswer   = 8 << 20
	giteaMaxMessage  = 300
	giteaPage        = 50 // Gitea's default MAX_RESPONSE_ITEMS
	giteaPages       = 20 // pages of a list read (open pull requests, statuses, reviews): 1000 items
	giteaSearchPages = 10 // repositories searched for a query: 500
)

// giteaWIPPrefix marks a draft: Gitea's API has no draft field on create; a
// title with one of its WORK_IN_PROGRESS_PREFIXES ("WIP:" by default) is
// a draft, and the answer's draft field says so.
const giteaWIPPrefix = "WIP: "

// The subset of Gitea's answers read here.
type (
	giteaUser struct {
		Login string `json:"login"`
	}
	giteaRepo struct {
		ID            int64     `json:"id"`
		Name          string    `json:"name"`
		FullName      string    `json:"full_name"`
		Owner         giteaUser `json:"owner"`
		Description   string    `json:"description"`
		Private       bool      `json:"private"`
		DefaultBranch string    `json:"default_branch"`
		HTMLURL       string    `json:"html_url"`
		Updated       time.Time `json:"updated_at"`
	}
	giteaBranch struct {
		Label  string `json:"label"` // the branch name
		Ref    string `json:"ref"`
		SHA    string `json:"sha"`
		RepoID int64  `json:"repo_id"`
	}
	giteaPull struct {
		Number    int         `json:"number"`
		HTMLURL   string      `json:"html_url"`
		Title     string      `json:"title"`
		Body      string      `json:"body"`
		State     string      `json:"state"`
		Draft     bool        `json:"draft"`
		Merged    bool        `json:"merged"`
		Mergeable bool        `json:"mergeable"`
		MergeSHA  *string     `json:"merge_commit_sha"`
		MergedAt  *time.Time  `json:"merged_at"`
		Created   *time.Time  `json:"created_at"`
		Updated   *time.Time  `json:"updated_at"`
		User      *giteaUser  `json:"user"`
		Head      giteaBranch `json:"head"`
		Base      giteaBranch `json:"base"`
	}
	giteaStatus struct {
		Context     string `json:"context"`
		Status      string `json:"status"`
		Description string `json:"description"`
		TargetURL   string `json:"target_url"`
	}
	giteaCombined struct {
		Statuses []giteaStatus `json:"statuses"`
	}
	giteaReview struct {
		ID        int64      `json:"id"`
		State     string     `json:"state"`
		Dismissed bool       `json:"dismissed"`
		User      *giteaUser `json:"user"`
	}
)

// Open opens a pull request from req.Head, or returns the open one.
func (g *giteaForge) Open(ctx context.Context, token string, req OpenRequest) (PullRequest, bool, error) {
	if err := giteaCheckRepo(req.Repo); err != nil {
		return PullRequest{}, false, err
	}
	if err := giteaCheckBranch("head", req.Head); err != nil {
		return PullRequest{}, false, err
	}
	if req.Base != "" {
		if err := giteaCheckBranch("base", req.Base); err != nil {
			return PullRequest{}, false, err
		}
	}
	if strings.TrimSpace(req.Title) == "" {
		return PullRequest{}, false, fmt.Errorf("open a pull request on %s: a title is required: %w", req.Repo, errkind.Invalid)
	}
	if pr, ok, err := g.findOpen(ctx, token, req.Repo, req.Head); err != nil || ok {
		return pr, false, err
	}
	base := req.Base
	if base == "" {
		var repo giteaRepo
		if err := g.call(ctx, token, "GET", giteaRepoPath(req.Repo), nil, &repo); err != nil {
			return PullRequest{}, false, err
		}
		if base = repo.DefaultBranch; base == "" {
			return PullRequest{}, false, fmt.Errorf("repository %s has no default branch (empty?): %w", req.Repo, errkind.Invalid)
		}
	}
	title := req.Title
	if req.Draft && !giteaHasWIPPrefix(title) {
		title = giteaWIPPrefix + title
	}
	var created giteaPull
	err := g.call(ctx, token, "POST", giteaRepoPath(req.Repo)+"/pulls", map[string]string{
		"head": req.Head, "base": base, "title": title, "body": req.Body,
	}, &created)
	if errors.Is(err, errkind.Conflict) {
		// Opened by someone else since findOpen: return theirs.
		if pr, ok, ferr := g.findOpen(ctx, token, req.Repo, req.Head); ferr == nil && ok {
			return pr, false, nil
		}
	}
	if err != nil {
		return PullRequest{}, false, err
	}
	pr, err := g.card(ctx, token, req.Repo, created)
	return pr, true, err
}

// findOpen looks for an open pull request from head within repo (not from
// a fork's branch of the same name).
func (g *giteaForge) findOpen(ctx context.Context, token string, repo Repo, head string) (PullRequest, bool, error) {
	for page := 1; page <= giteaPages; page++ {
		var pulls []giteaPull
		q := url.Values{"state": {"open"}, "sort": {"recentupdate"}, "limit": {strconv.Itoa(giteaPage)}, "page": {strconv.Itoa(page)}}
		if err := g.call(ctx, token, "GET", giteaRepoPath(repo)+"/pulls?"+q.Encode(), nil, &pulls); err != nil {
			return PullRequest{}, false, err
		}
		for _, p := range pulls {
			if p.Head.Label == head && p.Head.RepoID == p.Base.RepoID {
				pr, err := g.card(ctx, token, repo, p)
				return pr, err == nil, err
			}
		}
		if len(pulls) < giteaPage {
			break
		}
	}
	return PullRequest{}, false, nil
}

// Get is the card of pull request number.
func (g *giteaForge) Get(ctx context.Context, token string, repo Repo, number int) (PullRequest, error) {
	if err := giteaCheckRepo(repo); err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("pull request number %d: %w", number, errkind.Invalid)
	}
	p, err := g.pull(ctx, token, repo, number)
	if err != nil {
		return PullRequest{}, err
	}
	return g.card(ctx, token, repo, p)
}

// giteaMergeableWait is how long Get waits for Gitea to finish checking a pull
// request: its answer does not tell "still checking" from "conflict" (both
// read mergeable=false), and a check takes well under a second.
const giteaMergeableWait = 2 * time.Second

func (g *giteaForge) pull(ctx context.Context, token string, repo Repo, number int) (giteaPull, error) {
	path := giteaRepoPath(repo) + "/pulls/" + strconv.Itoa(number)
	var p giteaPull
	deadline := time.Now().Add(giteaMergeableWait)
	for {
		if err := g.call(ctx, token, "GET", path, nil, &p); err != nil {
			return giteaPull{}, err
		}
		if p.Mergeable || p.Merged || p.Draft || p.State != "open" || time.Now().After(deadline) {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return giteaPull{}, fmt.Errorf("pull request %s#%d: %w: %w", repo, number, ctx.Err(), errkind.Unavailable)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// card is p with its checks and review verdict.
func (g *giteaForge) card(ctx context.Context, token string, repo Repo, p giteaPull) (PullRequest, error) {
	pr := giteaPullRequest(repo, p)
	if pr.HeadSHA != "" {
		var statuses []giteaStatus
		err := giteaEachPage(func(q url.Values) (int, error) {
			var combined giteaCombined
			err := g.call(ctx, token, "GET", giteaRepoPath(repo)+"/commits/"+url.PathEscape(pr.HeadSHA)+"/status?"+q.Encode(), nil, &combined)
			statuses = append(statuses, combined.Statuses...)
			return len(combined.Statuses), err
		})
		if err != nil {
			return PullRequest{}, err
		}
		pr.Checks = giteaChecks(statuses)
	}
	var reviews []giteaReview
	err := giteaEachPage(func(q url.Values) (int, error) {
		var page []giteaReview
		err := g.call(ctx, token, "GET", giteaRepoPath(repo)+"/pulls/"+strconv.Itoa(p.Number)+"/reviews?"+q.Encode(), nil, &page)
		reviews = append(reviews, page...)
		return len(page), err
	})
	if err != nil {
		return PullRequest{}, err
	}
	pr.Review = giteaReviewState(reviews)
	return pr, nil
}

// giteaEachPage calls get with the query of pages 1, 2, … of a list
// (giteaPage items a page) until one comes back short, at most giteaPages.
func giteaEachPage(get func(q url.Values) (int, error)) error {
	for page := 1; page <= giteaPages; page++ {
		n, err := get(url.Values{"limit": {strconv.Itoa(giteaPage)}, "page": {strconv.Itoa(page)}})
		if err != nil || n < giteaPage {
			return err
		}
	}
	return nil
}

// giteaPullRequest is the card of p without checks and review.
func giteaPullRequest(repo Repo, p giteaPull) PullRequest {
	pr := PullRequest{
		Repo: repo, Number: p.Number, URL: p.HTMLURL, Title: p.Title, Body: p.Body,
		Draft: p.Draft, Head: p.Head.Label, HeadSHA: p.Head.SHA, Base: p.Base.Label,
		Review: ReviewNone, Checks: []Check{},
	}
	if pr.Head == "" {
		pr.Head = p.Head.Ref
	}
	if pr.Base == "" {
		pr.Base = p.Base.Ref
	}
	switch {
	case p.Merged:
		pr.State = StateMerged
	case p.State == "open":
		pr.State = StateOpen
	default:
		pr.State = StateClosed
	}
	// Gitea reads mergeable=false while it checks, on a conflict, and for
	// every draft: a draft's answer is unknown, Get waits out the check.
	switch {
	case pr.State != StateOpen || p.Draft:
		pr.Mergeable = MergeableUnknown
	case p.Mergeable:
		pr.Mergeable = MergeableYes
	default:
		pr.Mergeable = MergeableConflict
	}
	if p.User != nil {
		pr.Author = p.User.Login
	}
	if p.Created != nil {
		pr.Created = *p.Created
	}
	if p.Updated != nil {
		pr.Updated = *p.Updated
	}
	if p.Merged {
		if p.MergedAt != nil {
			pr.MergedAt = *p.MergedAt
		}
		if p.MergeSHA != nil {
			pr.MergeSHA = *p.MergeSHA
		}
	}
	return pr
}

// giteaChecks maps commit statuses (the latest per context, as the combined
// status gives them) to Checks, sorted by name.
func giteaChecks(statuses []giteaStatus) []Check {
	out := make([]Check, 0, len(statuses))
	for _, s := range statuses {
		c := Check{Name: s.Context, URL: s.TargetURL, Detail: s.Status}
		if s.Description != "" {
			c.Detail += ": " + s.Description
		}
		switch s.Status {
		case "pending":
			c.Outcome = CheckPending
		case "success":
			c.Outcome = CheckSuccess
		case "failure", "error":
			c.Outcome = CheckFailure
		default: // warning, skipped, and words of later versions
			c.Outcome = CheckNeutral
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, func(a, b Check) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// giteaReviewState is the verdict that counts: each reviewer's latest approval
// or request for changes that was not dismissed; any request for changes
// wins over approvals.
func giteaReviewState(reviews []giteaReview) string {
	latest := map[string]string{}
	slices.SortStableFunc(reviews, func(a, b giteaReview) int { return giteaCmpInt64(a.ID, b.ID) })
	for _, r := range reviews {
		if r.User == nil || r.Dismissed {
			continue
		}
		switch r.State {
		case "APPROVED", "REQUEST_CHANGES":
			latest[r.User.Login] = r.State
		}
	}
	out := ReviewNone
	for _, s := range latest {
		if s == "REQUEST_CHANGES" {
			return ReviewChangesRequested
		}
		out = ReviewApproved
	}
	return out
}

func giteaCmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Merge merges pull request number with method; sha, when set, must be
// its head.
func (g *giteaForge) Merge(ctx context.Context, token string, repo Repo, number int, method MergeMethod, sha string) (PullRequest, error) {
	if err := giteaCheckRepo(repo); err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("pull request number %d: %w", number, errkind.Invalid)
	}
	switch method {
	case Merge, Squash, Rebase:
	default:
		return PullRequest{}, fmt.Errorf("merge method %q: want merge, squash or rebase: %w", method, errkind.Invalid)
	}
	if sha != "" && !giteaIsHex(sha) {
		return PullRequest{}, fmt.Errorf("head sha %q: want a hex commit id: %w", sha, errkind.Invalid)
	}
	body := map[string]any{"Do": string(method)}
	if sha != "" {
		body["head_commit_id"] = sha
	}
	path := giteaRepoPath(repo) + "/pulls/" + strconv.Itoa(number) + "/merge"
	err := g.call(ctx, token, "POST", path, body, nil)
	// After a push Gitea checks the pull request again on its own time and
	// refuses a merge until it is done ("Please try again later", which it
	// also answers while a conflict stands): wait for the check like a
	// person retrying the button would.
	for deadline, pause := time.Now().Add(g.mergeWait), 200*time.Millisecond; giteaStillChecking(err) && time.Now().Before(deadline); pause = min(2*pause, 2*time.Second) {
		select {
		case <-ctx.Done():
			return PullRequest{}, fmt.Errorf("merge %s#%d: %w: %w", repo, number, ctx.Err(), errkind.Unavailable)
		case <-time.After(pause):
		}
		err = g.call(ctx, token, "POST", path, body, nil)
	}
	switch {
	case err == nil:
		return g.Get(ctx, token, repo, number)
	case giteaStillChecking(err):
		return PullRequest{}, fmt.Errorf("merge %s#%d: %w", repo, number, errkind.New(errkind.Conflict,
			fmt.Sprintf("Gitea still reads the pull request as not mergeable after %s: it conflicts with its base, or Gitea has not finished checking it; look at the card and try again", g.mergeWait)))
	case errors.Is(err, errkind.Conflict) && strings.Contains(err.Error(), "not allowed to merge"):
		// Gitea answers 405 to a token that may not merge, as to a pull
		// request that cannot be merged now.
		return PullRequest{}, fmt.Errorf("merge %s#%d: %w", repo, number, errkind.New(errkind.Forbidden, "the token may not merge this pull request"))
	}
	return PullRequest{}, err
}

// giteaMergeCheckingWait bounds how long Merge retries while Gitea answers
// that the pull request is not mergeable yet: a check after a push takes
// well under a second on a quiet host and several on a loaded one.
const giteaMergeCheckingWait = 20 * time.Second

// giteaStillChecking reports whether err is Gitea's answer to a merge of a
// pull request it does not read as mergeable now (checking or conflicting).
func giteaStillChecking(err error) bool {
	return errors.Is(err, errkind.Conflict) && strings.Contains(err.Error(), "Please try again later")
}

// Close closes pull request number without merging.
func (g *giteaForge) Close(ctx context.Context, token string, repo Repo, number int) (PullRequest, error) {
	if err := giteaCheckRepo(repo); err != nil {
		return PullRequest{}, err
	}
	if number <= 0 {
		return PullRequest{}, fmt.Errorf("pull request number %d: %w", number, errkind.Invalid)
	}
	var p giteaPull
	if err := g.call(ctx, token, "PATCH", giteaRepoPath(repo)+"/pulls/"+strconv.Itoa(number), map[string]string{"state": "closed"}, &p); err != nil {
		return PullRequest{}, err
	}
	return g.card(ctx, token, repo, p)
}

// Repos lists what the token reaches whose owner/name contains query,
// most recently updated first. Gitea's search matches names only, so the
// owner part is matched here: a query with a slash searches for its name
// part, one without reads pages of everything the token sees.
func (g *giteaForge) Repos(ctx context.Context, token, query string, limit int) ([]RepoInfo, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("repository limit %d: want at least 1: %w", limit, errkind.Invalid)
	}
	query = strings.ToLower(strings.TrimSpace(query))
	if len(query) > 200 {
		return nil, fmt.Errorf("repository query of %d bytes: at most 200: %w", len(query), errkind.Invalid)
	}
	q := url.Values{"sort": {"updated"}, "order": {"desc"}, "limit": {strconv.Itoa(giteaPage)}}
	if i := strings.LastIndex(query, "/"); i >= 0 && query[i+1:] != "" {
		q.Set("q", query[i+1:])
	}
	var out []RepoInfo
	for page := 1; page <= giteaSearchPages && len(out) < limit; page++ {
		q.Set("page", strconv.Itoa(page))
		var res struct {
			OK   bool        `json:"ok"`
			Data []giteaRepo `json:"data"`
		}
		if err := g.call(ctx, token, "GET", "/repos/search?"+q.Encode(), nil, &res); err != nil {
			return nil, err
		}
		if !res.OK {
			return nil, fmt.Errorf("gitea: repository search failed: %w", errkind.Unavailable)
		}
		for _, r := range res.Data {
			info := giteaRepoInfo(r)
			if query != "" && !strings.Contains(strings.ToLower(info.Repo.String()), query) {
				continue
			}
			if out = append(out, info); len(out) == limit {
				break
			}
		}
		if len(res.Data) < giteaPage {
			break
		}
	}
	if out == nil {
		out = []RepoInfo{}
	}
	return out, nil
}

func giteaRepoInfo(r giteaRepo) RepoInfo {
	owner := r.Owner.Login
	if owner == "" {
		owner, _, _ = strings.Cut(r.FullName, "/")
	}
	return RepoInfo{
		Repo: Repo{Owner: owner, Name: r.Name}, Description: r.Description, Private: r.Private,
		DefaultBranch: r.DefaultBranch, URL: r.HTMLURL, Updated: r.Updated,
	}
}

// call sends one request to the API (path below /api/v1, with its query)
// and decodes a 2xx answer into out when out is not nil.
func (g *giteaForge) call(ctx context.Context, token, method, path string, in, out any) error {
	if token == "" {
		return fmt.Errorf("gitea: no token: %w", errkind.Invalid)
	}
	if strings.ContainsAny(token, "\r\n") {
		return fmt.Errorf("gitea: a token holds no line breaks: %w", errkind.Invalid)
	}
	op := method + " " + giteaStripQuery(path)
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("gitea %s: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.api+path, body)
	if err != nil {
		return fmt.Errorf("gitea %s: %v: %w", op, err, errkind.Invalid)
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		// url.Error names the URL, which holds no token (it travels in a
		// header); scrub anyway, a caller might have put it in the base.
		return fmt.Errorf("gitea %s: %s: %w", op, giteaScrub(err.Error(), token), errkind.Unavailable)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, giteaMaxAnswer+1))
	if err != nil {
		return fmt.Errorf("gitea %s: reading the answer: %s: %w", op, giteaScrub(err.Error(), token), errkind.Unavailable)
	}
	if len(data) > giteaMaxAnswer {
		return fmt.Errorf("gitea %s: answer over %d bytes: %w", op, giteaMaxAnswer, errkind.Unavailable)
	}
	if resp.StatusCode/100 != 2 {
		return giteaStatusError(op, resp.StatusCode, resp.Header.Get("Location"), giteaScrub(giteaHostMessage(data), token))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("gitea %s: unreadable answer: %v: %w", op, err, errkind.Unavailable)
	}
	return nil
}

// giteaStatusKind is the errkind of an HTTP status from the host.
func giteaStatusKind(status int) *errkind.Kind {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusUnprocessableEntity, status == http.StatusBadRequest:
		return errkind.Invalid
	case status == http.StatusForbidden:
		return errkind.Forbidden
	case status == http.StatusNotFound, status == http.StatusGone:
		return errkind.NotFound
	case status == http.StatusConflict, status == http.StatusMethodNotAllowed:
		return errkind.Conflict
	case status == http.StatusTooManyRequests, status >= 500:
		return errkind.Unavailable
	}
	return errkind.Invalid // 3xx not followed, other 4xx
}

// giteaStatusError is the error for a non-2xx answer; msg is the host's own
// message (already free of the token).
func giteaStatusError(op string, status int, location, msg string) error {
	kind := giteaStatusKind(status)
	switch {
	case status == http.StatusUnauthorized:
		msg = "token rejected"
	case status/100 == 3:
		msg = fmt.Sprintf("redirected to %q, not followed with a token (is the base address right?)", giteaSanitize(location))
	default:
		if msg = giteaSanitize(msg); msg == "" {
			msg = http.StatusText(status)
		}
	}
	return fmt.Errorf("gitea %s: %d: %s: %w", op, status, msg, kind)
}

// giteaHostMessage is the message of an error answer: Gitea's {"message": ...}
// or, failing that, the start of the body as text, on one line and short.
func giteaHostMessage(data []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	msg := ""
	if json.Unmarshal(data, &e) == nil {
		msg = e.Message
	} else if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("<")) { // not an HTML error page
		msg = string(data)
	}
	return giteaSanitize(msg)
}

// giteaSanitize keeps a host's text to one short printable line.
func giteaSanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			return ' '
		case !unicode.IsPrint(r):
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > giteaMaxMessage {
		cut := giteaMaxMessage
		for cut > 0 && !giteaUTF8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func giteaUTF8Start(b byte) bool { return b&0xC0 != 0x80 }

// giteaScrub removes the token from text the host or the network stack wrote.
func giteaScrub(s, token string) string {
	if len(token) < 4 {
		return s
	}
	return strings.ReplaceAll(s, token, "[token]")
}

func giteaStripQuery(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

func giteaRepoPath(r Repo) string {
	return "/repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name)
}

// giteaCheckRepo refuses an owner or name that is not one path segment.
func giteaCheckRepo(r Repo) error {
	for _, s := range []string{r.Owner, r.Name} {
		if s == "" || s == "." || s == ".." || len(s) > 100 || strings.ContainsAny(s, "/\\?#%") || strings.ContainsFunc(s, unicode.IsControl) {
			return fmt.Errorf("repository %q: want owner/name: %w", r.String(), errkind.Invalid)
		}
	}
	return nil
}

// giteaCheckBranch refuses what git would not take as a branch name's shape.
func giteaCheckBranch(what, b string) error {
	if b == "" || len(b) > 255 || strings.HasPrefix(b, "-") || strings.Contains(b, "..") || strings.ContainsFunc(b, func(r rune) bool {
		return unicode.IsControl(r) || unicode.IsSpace(r) || strings.ContainsRune("~^:?*[\\", r)
	}) {
		return fmt.Errorf("%s branch %q: not a branch name: %w", what, b, errkind.Invalid)
	}
	return nil
}

func giteaIsHex(s string) bool {
	if len(s) < 7 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

func giteaHasWIPPrefix(title string) bool {
	t := strings.ToUpper(strings.TrimSpace(title))
	return strings.HasPrefix(t, "WIP:") || strings.HasPrefix(t, "[WIP]")
}
