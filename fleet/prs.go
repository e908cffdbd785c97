package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
)

// Pull requests: a box's branch becomes a pull request on the forge
// (git.kind at git.host), made by the gateway with the token of the account
// that reached the repository; the box never holds it. Each pull request is
// a row (box_prs) with the last card the forge gave, which the fronts show
// and a watcher (one gateway of a cluster) keeps fresh, sending EventPR
// when the card changes and EventPRChecks when the head's checks finish.

// PRRequest is a pull request to open from a box's branch.
type PRRequest struct {
	// Repo is owner/name (or its URL, or the directory under /workspace);
	// "" when the box holds exactly one repository it may push.
	Repo string `json:"repo,omitempty"`
	// Title "" is the task's first line; Body "" is the task, the agent's
	// last summary and a line naming the box.
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
	Draft bool   `json:"draft,omitempty"`
	// Base is the branch to merge into; "" is the repository's default.
	Base string `json:"base,omitempty"`
}

// PR is the card of a box's pull request, as the forge answered (its
// texts redacted: the title and body hold what the box wrote).
type PR struct {
	forge.PullRequest
	Box string `json:"box"`
	// Account is the box owner's account whose token acts on it.
	Account string `json:"account"`
	// ChecksOutcome sums the checks up (forge.ChecksOutcome): failure,
	// pending, success, or "" without checks.
	ChecksOutcome string `json:"checks_outcome"`
	// Opened: this call opened it (false: it was open already).
	Opened bool `json:"opened,omitempty"`
	// Seen is when the forge said this.
	Seen time.Time `json:"seen"`
}

// PRRef is a pull request in a Box and an Event: where it is and how it
// stands.
type PRRef struct {
	Repo    string `json:"repo"`
	Number  int    `json:"number"`
	URL     string `json:"url"`
	State   string `json:"state"`
	HeadSHA string `json:"head_sha"`
	// Checks is the checks' outcome ("" without checks).
	Checks string `json:"checks"`
}

// Errors of pull requests and repository lists, both ErrNotFound.
var (
	// ErrNoPR: the box has no pull request (yet) for the repository.
	ErrNoPR = errkind.New(errkind.NotFound, "pull request not found")
	// ErrNoAccount: the caller has no such account (or no default one).
	ErrNoAccount = errkind.New(errkind.NotFound, "account not found")
)

// Limits of what a caller gives a pull request.
const (
	maxPRTitle = 256
	maxPRBody  = 60 << 10
	// defaultTitleRunes bounds a title drawn from the task.
	defaultTitleRunes = 72
	// reposLimit is how many repositories Repos lists at most.
	reposLimit = 100
	// maxRepoQuery bounds a repository search.
	maxRepoQuery = 100
)

// ParseMergeMethod reads how a pull request lands: "" and "merge" make a
// merge commit, "squash" and "rebase" what they say.
func ParseMergeMethod(s string) (forge.MergeMethod, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "merge":
		return forge.Merge, nil
	case "squash":
		return forge.Squash, nil
	case "rebase":
		return forge.Rebase, nil
	}
	return "", fmt.Errorf("merge method %q: want merge, squash or rebase: %w", s, ErrInvalid)
}

func (f *Fleet) needForge() error {
	if f.forge == nil {
		return fmt.Errorf("pull requests are not available on this gateway (no forge: set git.kind and git.host): %w", ErrUnavailable)
	}
	return nil
}

// checkPRRequest refuses a title, body or base no forge should get.
func checkPRRequest(req PRRequest) error {
	for _, t := range []struct{ what, s string }{{"title", req.Title}, {"body", req.Body}} {
		if !utf8.ValidString(t.s) || strings.ContainsRune(t.s, 0) {
			return fmt.Errorf("pull request %s is not valid UTF-8 text: %w", t.what, ErrInvalid)
		}
	}
	if strings.ContainsAny(req.Title, "\r\n") || len(req.Title) > maxPRTitle {
		return fmt.Errorf("pull request title: want one line of at most %d bytes: %w", maxPRTitle, ErrInvalid)
	}
	if len(req.Body) > maxPRBody {
		return fmt.Errorf("pull request body is %d bytes (max %d): %w", len(req.Body), maxPRBody, ErrInvalid)
	}
	if req.Base != "" {
		if err := validRef(req.Base); err != nil {
			return fmt.Errorf("base branch: %w", err)
		}
	}
	return nil
}

// prRepo picks the box's repository a pull request is for: the one named
// (owner/name, its URL or its directory), else the only one the box may
// push. It must allow pushing the box's branch.
func (f *Fleet) prRepo(rec record, name string) (Repo, error) {
	var pushable []string
	for _, r := range rec.Repos {
		if r.Push {
			pushable = append(pushable, r.Name)
		}
	}
	name = strings.TrimSpace(name)
	if name == "" {
		switch len(pushable) {
		case 0:
			return Repo{}, fmt.Errorf("box %q holds no repository it may push: %w", rec.Name, ErrInvalid)
		case 1:
			name = pushable[0]
		default:
			return Repo{}, fmt.Errorf("box %q holds %d repositories (%s): name one with --repo: %w", rec.Name, len(pushable), strings.Join(pushable, ", "), ErrInvalid)
		}
	}
	want := name
	if r, err := f.settings.accounts.ResolveRepo(name); err == nil {
		want = r.String()
	}
	for _, r := range rec.Repos {
		if r.Name == want || r.Dir == name {
			if !r.Push {
				return Repo{}, fmt.Errorf("box %q may not push %s: %w", rec.Name, r.Name, ErrForbidden)
			}
			return r, nil
		}
	}
	return Repo{}, fmt.Errorf("box %q holds no repository %q (it holds: %s): %w", rec.Name, name, strings.Join(pushable, ", "), ErrNotFound)
}

func forgeRepo(name string) (forge.Repo, error) {
	r, err := accounts.ParseRepo(name)
	if err != nil {
		return forge.Repo{}, err
	}
	return forge.Repo{Owner: r.Owner, Name: r.Name}, nil
}

// token is the token of the box owner's account that reached repo.
func (f *Fleet) token(ctx context.Context, owner, account string) (string, error) {
	_, tok, err := f.settings.accounts.Token(ctx, owner, account)
	if errors.Is(err, keys.ErrNotFound) {
		return "", fmt.Errorf("the account %q that reached the repository is gone: add it again (account add %s): %w", account, account, ErrInvalid)
	}
	if err != nil {
		return "", err
	}
	return tok, nil
}

// pushScript pushes the box's branch ($1) to its remote (the gateway's git
// endpoint, which adds the token outside the box) and prints the commit it
// holds.
const pushScript = `git push --quiet origin "refs/heads/$1:refs/heads/$1" 2>&1 && git rev-parse --verify --quiet "refs/heads/$1^{commit}"`

// pushBranch pushes the box's branch of repo from inside the box, as the
// agent user in the repository's directory, so the pull request holds
// what the operator sees there; it returns the pushed commit.
func (f *Fleet) pushBranch(ctx context.Context, rec record, r Repo) (string, error) {
	out, err := run(ctx, f.vm, rec.VM, agent.ExecRequest{User: agent.AgentUser, Dir: r.Dir,
		Argv: []string{"/bin/sh", "-c", pushScript, "sh", r.Branch}, Env: f.runs.agentEnv(rec)})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			kind := ErrUnavailable
			if strings.Contains(out, "rejected") || strings.Contains(out, "non-fast-forward") {
				kind = ErrConflict
			}
			return "", fmt.Errorf("push %s of %s from the box: %s: %w", r.Branch, r.Name, lastLine(out), kind)
		}
		return "", fmt.Errorf("push %s of %s from the box: %w", r.Branch, r.Name, vmErr(err))
	}
	sha := lastLine(out)
	if len(sha) != 40 && len(sha) != 64 {
		return "", fmt.Errorf("push %s of %s: the box's branch names no commit (%q): %w", r.Branch, r.Name, sha, ErrUnavailable)
	}
	return sha, nil
}

// defaultTitle is the task's first line, at most defaultTitleRunes.
func defaultTitle(task string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(task), "\n")
	line = strings.TrimSpace(line)
	if r := []rune(line); len(r) > defaultTitleRunes {
		line = strings.TrimSpace(string(r[:defaultTitleRunes-1])) + "…"
	}
	if line == "" {
		line = "Changes from sbx"
	}
	return line
}

// defaultBody is the task, the agent's last summary and a line naming the
// box.
func defaultBody(rec record) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(rec.Task))
	if s := strings.TrimSpace(rec.Summary); s != "" {
		b.WriteString("\n\n## Summary\n\n")
		b.WriteString(s)
	}
	fmt.Fprintf(&b, "\n\n---\nOpened by sbx from box `%s`.\n", rec.Name)
	out := b.String()
	if len(out) > maxPRBody {
		cut := maxPRBody - len("…")
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}

func (f *Fleet) openPR(ctx context.Context, caller keys.Actor, name string, req PRRequest) (PR, error) {
	if err := f.needForge(); err != nil {
		return PR{}, err
	}
	if err := checkPRRequest(req); err != nil {
		return PR{}, err
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	defer lock.Unlock()
	r, err := f.prRepo(rec, req.Repo)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	fr, err := forgeRepo(r.Name)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	token, err := f.token(ctx, rec.Owner, r.Account)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	if _, err := f.machine(ctx, caller, &rec); err != nil {
		return PR{}, f.safeErr(err)
	}
	e := f.entry(caller, "pr.open", name)
	e.Detail = r.Name + " " + r.Branch
	sha, err := f.pushBranch(ctx, rec, r)
	if err == nil && sha == r.Base {
		err = fmt.Errorf("nothing to open: %s of %s has no commits beyond the one the box started from (%s): %w", r.Branch, r.Name, short(r.Base), ErrInvalid)
	}
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return PR{}, f.safeErr(err)
	}
	title, body := req.Title, req.Body
	if strings.TrimSpace(title) == "" {
		title = defaultTitle(rec.Task)
	}
	if strings.TrimSpace(body) == "" {
		body = defaultBody(rec)
	}
	// What leaves for the forge passes the redactor, like all box text.
	pr, opened, err := f.forge.Open(ctx, token, forge.OpenRequest{Repo: fr, Head: r.Branch, Base: req.Base,
		Title: f.red.String(title).String(), Body: f.red.String(body).String(), Draft: req.Draft})
	if err != nil {
		err = forgeErr("open a pull request from "+r.Branch+" on "+r.Name, err)
		f.audit.Finish(ctx, e, err, forgeResult(err))
		return PR{}, f.safeErr(err)
	}
	if pr.State == forge.StateOpen && pr.HeadSHA != sha {
		// The host moves an open pull request's head after a push on its
		// own time: wait for the commit just pushed.
		pr = f.waitHead(ctx, token, fr, pr, sha)
	}
	verb := "opened"
	if !opened {
		verb = "already open"
	}
	e.Detail = pr.URL + " " + verb
	card, err := f.savePR(ctx, rec, r.Account, pr, e)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return PR{}, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	card.Opened = opened
	f.emitPR(rec, EventPR, card, verb)
	return card, nil
}

// waitHead asks for the card until its head is sha, for up to ten seconds;
// it returns the last card it got.
func (f *Fleet) waitHead(ctx context.Context, token string, fr forge.Repo, pr forge.PullRequest, sha string) forge.PullRequest {
	deadline := time.Now().Add(10 * time.Second)
	for pr.HeadSHA != sha && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return pr
		case <-time.After(300 * time.Millisecond):
		}
		if got, err := f.forge.Get(ctx, token, fr, pr.Number); err == nil {
			pr = got
		}
	}
	return pr
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// forgeErr names what was asked of the forge; the forge's error keeps its
// kind.
func forgeErr(what string, err error) error {
	return fmt.Errorf("%s: %w", what, err)
}

// forgeResult is the audit result of a forge call's error.
func forgeResult(err error) string {
	if errors.Is(err, ErrForbidden) || errors.Is(err, accounts.ErrTokenRejected) {
		return audit.ResultDenied
	}
	return audit.ResultError
}

// card is what fronts see of pr: its texts redacted.
func (f *Fleet) card(box, account string, pr forge.PullRequest, seen time.Time) PR {
	pr.Title = f.red.String(pr.Title).String()
	pr.Body = f.red.String(pr.Body).String()
	checks := make([]forge.Check, 0, len(pr.Checks))
	for _, c := range pr.Checks {
		c.Name, c.Detail = f.red.String(c.Name).String(), f.red.String(c.Detail).String()
		checks = append(checks, c)
	}
	pr.Checks = checks
	return PR{PullRequest: pr, Box: box, Account: account, ChecksOutcome: forge.ChecksOutcome(pr.Checks), Seen: seen}
}

// savePR keeps pr as the box's row (with e, the zero Entry for the
// watcher's bookkeeping) and returns its card.
func (f *Fleet) savePR(ctx context.Context, rec record, account string, pr forge.PullRequest, e audit.Entry) (PR, error) {
	card := f.card(rec.Name, account, pr, f.now())
	doc, err := json.Marshal(card)
	if err != nil {
		return PR{}, err
	}
	err = f.store.PutPR(ctx, PRDoc{Box: rec.Name, Owner: rec.Owner, Repo: pr.Repo.String(), Number: pr.Number, Account: account,
		URL: pr.URL, Base: pr.Base, Head: pr.Head, HeadSHA: pr.HeadSHA, State: pr.State, Checks: card.ChecksOutcome,
		Card: doc, Updated: card.Seen}, e)
	return card, err
}

// storedCard is the card a row keeps, without its body (a Box's view).
func storedCard(d PRDoc) PR {
	var c PR
	if err := json.Unmarshal(d.Card, &c); err != nil || c.Number != d.Number {
		// The columns alone, should the card not read.
		c = PR{Box: d.Box, Account: d.Account, ChecksOutcome: d.Checks}
		c.URL, c.Number, c.State, c.Head, c.HeadSHA, c.Base = d.URL, d.Number, d.State, d.Head, d.HeadSHA, d.Base
		if r, err := forgeRepo(d.Repo); err == nil {
			c.Repo = r
		}
	}
	c.Body = ""
	return c
}

func cardRef(c PR) PRRef {
	return PRRef{Repo: c.Repo.String(), Number: c.Number, URL: c.URL, State: c.State, HeadSHA: c.HeadSHA, Checks: c.ChecksOutcome}
}

// emitPR tells the box's watchers about its pull request.
func (f *Fleet) emitPR(rec record, kind string, c PR, note string) {
	ref := cardRef(c)
	f.events.publish(Event{Box: rec.Name, Owner: rec.Owner, Kind: kind, State: rec.State,
		Note: f.red.String(fmt.Sprintf("%s#%d %s", ref.Repo, ref.Number, note)), At: f.now(), PR: &ref})
}

// prRow is the newest row of the box's pull requests from repo r.
func (f *Fleet) prRow(ctx context.Context, rec record, r Repo) (PRDoc, error) {
	docs, err := f.store.ListPRs(ctx, rec.Name)
	if err != nil {
		return PRDoc{}, err
	}
	for _, d := range docs {
		if d.Repo == r.Name {
			return d, nil
		}
	}
	return PRDoc{}, fmt.Errorf("box %q has no pull request for %s yet: open one (pr %s): %w", rec.Name, r.Name, rec.Name, ErrNoPR)
}

func (f *Fleet) pr(ctx context.Context, caller keys.Actor, name, repo string) (PR, error) {
	if err := f.needForge(); err != nil {
		return PR{}, err
	}
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	r, err := f.prRepo(rec, repo)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	d, err := f.prRow(ctx, rec, r)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	// Every call the gateway makes on the forge for someone is an audit
	// row, a read too (the watcher's own polls are not: they act for no
	// one, and what they change is an Event).
	e := f.entry(caller, "pr.get", name)
	e.Detail = d.URL
	card, err := f.refreshPR(ctx, d)
	f.recordForgeCall(ctx, e, err)
	return card, f.safeErr(err)
}

// recordForgeCall writes the audit row of a read made on the forge for a
// caller, with its outcome.
func (f *Fleet) recordForgeCall(ctx context.Context, e audit.Entry, err error) {
	if err != nil {
		f.audit.Finish(ctx, e, err, forgeResult(err))
		return
	}
	_ = f.audit.Record(ctx, e)
}

// refreshPR asks the forge for d's card, saves it when it changed and
// sends the events the change makes.
func (f *Fleet) refreshPR(ctx context.Context, d PRDoc) (PR, error) {
	fr, err := forgeRepo(d.Repo)
	if err != nil {
		return PR{}, err
	}
	token, err := f.token(ctx, d.Owner, d.Account)
	if err != nil {
		return PR{}, err
	}
	pr, err := f.forge.Get(ctx, token, fr, d.Number)
	if err != nil {
		return PR{}, forgeErr(fmt.Sprintf("the card of %s#%d", d.Repo, d.Number), err)
	}
	var old PR
	_ = json.Unmarshal(d.Card, &old)
	now := f.card(d.Box, d.Account, pr, f.now())
	if !changed(old, now) {
		now.Seen = f.now()
		return now, nil
	}
	rec, err := f.records.load(ctx, d.Box)
	if err != nil {
		return PR{}, err
	}
	card, err := f.savePR(ctx, rec, d.Account, pr, audit.Entry{})
	if err != nil {
		return PR{}, err
	}
	switch {
	case old.State != card.State:
		f.emitPR(rec, EventPR, card, card.State)
	case old.HeadSHA != card.HeadSHA:
		f.emitPR(rec, EventPR, card, "head "+short(card.HeadSHA))
	default:
		f.emitPR(rec, EventPR, card, "updated")
	}
	if o := card.ChecksOutcome; (o == forge.CheckSuccess || o == forge.CheckFailure) && (o != old.ChecksOutcome || card.HeadSHA != old.HeadSHA) {
		f.emitPR(rec, EventPRChecks, card, "checks finished: "+o)
	}
	return card, nil
}

// changed says whether a card differs in what a front shows.
func changed(a, b PR) bool {
	if a.State != b.State || a.HeadSHA != b.HeadSHA || a.Mergeable != b.Mergeable || a.Review != b.Review ||
		a.Title != b.Title || a.Draft != b.Draft || a.Base != b.Base || len(a.Checks) != len(b.Checks) {
		return true
	}
	for i := range a.Checks {
		if a.Checks[i] != b.Checks[i] {
			return true
		}
	}
	return false
}

// openRow is the box's pull request from repo that is open, for merge and
// close.
func (f *Fleet) openRow(ctx context.Context, caller keys.Actor, name, repo string) (record, *boxMutex, Repo, PRDoc, error) {
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return record{}, nil, Repo{}, PRDoc{}, err
	}
	r, err := f.prRepo(rec, repo)
	if err == nil {
		var d PRDoc
		if d, err = f.prRow(ctx, rec, r); err == nil {
			if d.State != forge.StateOpen {
				err = fmt.Errorf("%s#%d is %s already: %w", d.Repo, d.Number, d.State, ErrConflict)
			} else {
				return rec, lock, r, d, nil
			}
		}
	}
	lock.Unlock()
	return record{}, nil, Repo{}, PRDoc{}, err
}

func (f *Fleet) mergePR(ctx context.Context, caller keys.Actor, name, repo string, method forge.MergeMethod) (PR, error) {
	if _, err := ParseMergeMethod(string(method)); err != nil {
		return PR{}, err
	}
	if method == "" {
		method = forge.Merge
	}
	return f.endPR(ctx, caller, name, repo, "pr.merge", string(method), func(rec record, d PRDoc, token string, fr forge.Repo) (forge.PullRequest, error) {
		// The head the card last showed: the host refuses if it moved since.
		pr, err := f.forge.Merge(ctx, token, fr, d.Number, method, d.HeadSHA)
		if errors.Is(err, ErrConflict) {
			if cur, gerr := f.forge.Get(ctx, token, fr, d.Number); gerr == nil && cur.HeadSHA != d.HeadSHA {
				_, _ = f.savePR(ctx, rec, d.Account, cur, audit.Entry{})
				err = fmt.Errorf("the branch moved (its head is %s now, the card showed %s): look at the card again: %w", short(cur.HeadSHA), short(d.HeadSHA), ErrConflict)
			}
		}
		return pr, err
	})
}

func (f *Fleet) closePR(ctx context.Context, caller keys.Actor, name, repo string) (PR, error) {
	return f.endPR(ctx, caller, name, repo, "pr.close", "", func(_ record, d PRDoc, token string, fr forge.Repo) (forge.PullRequest, error) {
		return f.forge.Close(ctx, token, fr, d.Number)
	})
}

// endPR merges or closes (do) the box's open pull request from repo, under
// the box's lock, with its audit row (action, the URL, detail and the head
// the card showed), the saved card and the event.
func (f *Fleet) endPR(ctx context.Context, caller keys.Actor, name, repo, action, detail string,
	do func(rec record, d PRDoc, token string, fr forge.Repo) (forge.PullRequest, error)) (PR, error) {
	if err := f.needForge(); err != nil {
		return PR{}, err
	}
	rec, lock, _, d, err := f.openRow(ctx, caller, name, repo)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	defer lock.Unlock()
	fr, err := forgeRepo(d.Repo)
	if err != nil {
		return PR{}, f.safeErr(err)
	}
	e := f.entry(caller, action, name)
	e.Detail = strings.TrimSpace(d.URL + " " + detail + " " + short(d.HeadSHA))
	token, err := f.token(ctx, rec.Owner, d.Account)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return PR{}, f.safeErr(err)
	}
	pr, err := do(rec, d, token, fr)
	if err != nil {
		err = forgeErr(fmt.Sprintf("%s %s#%d", strings.TrimPrefix(action, "pr."), d.Repo, d.Number), err)
		f.audit.Finish(ctx, e, err, forgeResult(err))
		return PR{}, f.safeErr(err)
	}
	card, err := f.savePR(ctx, rec, d.Account, pr, e)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return PR{}, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	f.emitPR(rec, EventPR, card, card.State)
	return card, nil
}

func (f *Fleet) repos(ctx context.Context, caller keys.Actor, account, query string) ([]forge.RepoInfo, error) {
	if err := f.needForge(); err != nil {
		return nil, err
	}
	query = strings.TrimSpace(query)
	if len(query) > maxRepoQuery || !utf8.ValidString(query) || strings.ContainsFunc(query, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("repository search: want at most %d printable characters: %w", maxRepoQuery, ErrInvalid)
	}
	if account == "" {
		list, err := f.settings.accounts.List(ctx, caller, caller.User)
		if err != nil {
			return nil, f.safeErr(err)
		}
		for _, a := range list {
			if a.Default || len(list) == 1 {
				account = a.Name
				break
			}
		}
		if account == "" {
			return nil, fmt.Errorf("you have no default account: add one (account add NAME) or name one with --account: %w", ErrInvalid)
		}
	} else if err := accounts.ValidName(account); err != nil {
		return nil, err
	}
	_, token, err := f.settings.accounts.Token(ctx, caller.User, account)
	if errors.Is(err, keys.ErrNotFound) {
		return nil, fmt.Errorf("you have no account %q (see account ls): %w", account, ErrNoAccount)
	}
	if err != nil {
		return nil, f.safeErr(err)
	}
	e := f.entry(caller, "repos.list", account)
	e.Detail = "query " + strconv.Quote(query)
	out, err := f.forge.Repos(ctx, token, query, reposLimit)
	if err != nil {
		err = forgeErr("list the repositories of account "+account, err)
		f.recordForgeCall(ctx, e, err)
		return nil, f.safeErr(err)
	}
	f.recordForgeCall(ctx, e, nil)
	if out == nil {
		out = []forge.RepoInfo{}
	}
	return out, nil
}

// watchPRs, each Policy.PRPollEvery, asks the forge about every open pull
// request: one gateway of a cluster does (it holds the lease while it
// lives).
func (f *Fleet) watchPRs(ctx context.Context) {
	if f.forge != nil && f.leases.once(ctx, "prs/watch", 3*f.policy.get().PRPollEvery) {
		f.pollPRs(ctx)
	}
}

// pollPRs refreshes every open pull request's card.
func (f *Fleet) pollPRs(ctx context.Context) {
	docs, err := f.store.OpenPRs(ctx)
	if err != nil {
		f.log.Warn("poll pull requests", "err", err)
		return
	}
	for _, d := range docs {
		if ctx.Err() != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := f.refreshPR(cctx, d); err != nil {
			f.log.Warn("poll pull request", "box", d.Box, "pr", d.URL, "err", f.safeErr(err))
		}
		cancel()
	}
}
