package forge_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/forge/giteatest"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/internal/errkind"
)

// pushBranch clones r, commits files on branch (from main, or from the
// branch when it exists) and pushes it with the token as the password, as a
// box's branch reaches the host; it returns the new head.
func pushBranch(t *testing.T, srv *giteatest.Server, r forge.Repo, branch string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "work")
	gittest.Git(t, t.TempDir(), "clone", "-q", srv.AuthCloneURL(r, "x-access-token", srv.Token), dir)
	if _, err := gittest.TryGit(dir, "checkout", "-q", branch); err != nil {
		gittest.Git(t, dir, "checkout", "-q", "-b", branch)
	}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gittest.Git(t, dir, "add", "-A")
	gittest.Git(t, dir, "commit", "-q", "-m", "change on "+branch)
	gittest.Git(t, dir, "push", "-q", "origin", branch)
	return gittest.Git(t, dir, "rev-parse", "HEAD")
}

// waitPR reads pull request number until ok holds (Gitea updates a pull
// request's head and mergeability in the background after a push).
func waitPR(t *testing.T, f forge.Forge, token string, r forge.Repo, number int, what string, ok func(forge.PullRequest) bool) forge.PullRequest {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pr, err := f.Get(context.Background(), token, r, number)
		if err != nil {
			t.Fatalf("Get #%d: %v", number, err)
		}
		if ok(pr) {
			return pr
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull request #%d: %s did not happen in 30s: %+v", number, what, pr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func wantKind(t *testing.T, what string, err error, kind *errkind.Kind) {
	t.Helper()
	if got := errkind.Of(err); got != kind {
		t.Fatalf("%s: error %v of kind %v, want %v", what, err, got, kind)
	}
}

// TestGitea drives a real Gitea from a box's branch to a merged pull
// request and through the errors the core must tell apart.
func TestGitea(t *testing.T) {
	ctx := context.Background()
	srv := giteatest.New(t)
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := forge.NewGitea(base, nil)
	if f.Kind() != forge.Gitea {
		t.Fatalf("Kind = %q", f.Kind())
	}
	tok := srv.Token
	repo := srv.CreateRepo(t, "widget", map[string]string{"README.md": "one\ntwo\nthree\n"})
	mainSHA := srv.BranchSHA(t, repo, "main")

	// Open, and open again: the same pull request.
	sha1 := pushBranch(t, srv, repo, "sbx/box1", map[string]string{"README.md": "one\nTWO\nthree\n", "box1.txt": "box1\n"})
	req := forge.OpenRequest{Repo: repo, Head: "sbx/box1", Title: "box1: shout two", Body: "from box1"}
	pr, opened, err := f.Open(ctx, tok, req)
	if err != nil || !opened {
		t.Fatalf("Open = %+v, %v, %v; want opened", pr, opened, err)
	}
	if pr.Number <= 0 || pr.State != forge.StateOpen || pr.Head != "sbx/box1" || pr.Base != "main" || pr.HeadSHA != sha1 ||
		pr.Title != req.Title || pr.Body != req.Body || pr.Draft || pr.Author != srv.Admin || pr.Repo != repo ||
		!strings.HasPrefix(pr.URL, srv.URL+"/") || pr.Created.IsZero() || pr.Review != forge.ReviewNone || pr.Checks == nil {
		t.Fatalf("Open = %+v", pr)
	}
	again, opened, err := f.Open(ctx, tok, req)
	if err != nil || opened || again.Number != pr.Number {
		t.Fatalf("Open again = #%d, opened %v, %v; want #%d, not opened", again.Number, opened, err, pr.Number)
	}

	// Get: mergeable, no checks; then a pending and a successful status.
	got, err := f.Get(ctx, tok, repo, pr.Number)
	if err != nil || got.Mergeable != forge.MergeableYes || len(got.Checks) != 0 || got.HeadSHA != sha1 {
		t.Fatalf("Get = %+v, %v; want mergeable, no checks, head %s", got, err, sha1)
	}
	srv.SetStatus(t, repo, sha1, "pending", "ci/test")
	got, err = f.Get(ctx, tok, repo, pr.Number)
	if err != nil || len(got.Checks) != 1 || got.Checks[0].Name != "ci/test" || got.Checks[0].Outcome != forge.CheckPending ||
		!strings.Contains(got.Checks[0].Detail, "pending") || got.Checks[0].URL == "" || forge.ChecksOutcome(got.Checks) != forge.CheckPending {
		t.Fatalf("Get after pending = %+v, %v", got.Checks, err)
	}
	srv.SetStatus(t, repo, sha1, "success", "ci/test")
	srv.SetStatus(t, repo, sha1, "failure", "ci/lint")
	got, err = f.Get(ctx, tok, repo, pr.Number)
	if err != nil || len(got.Checks) != 2 || got.Checks[0].Name != "ci/lint" || got.Checks[0].Outcome != forge.CheckFailure ||
		got.Checks[1].Outcome != forge.CheckSuccess || forge.ChecksOutcome(got.Checks) != forge.CheckFailure {
		t.Fatalf("Get after success and failure = %+v, %v", got.Checks, err)
	}
	srv.SetStatus(t, repo, sha1, "success", "ci/lint")

	// A second pull request that will conflict with the first once it lands.
	push3 := pushBranch(t, srv, repo, "sbx/box3", map[string]string{"README.md": "one\ntwo, quietly\nthree\n"})
	pr3, _, err := f.Open(ctx, tok, forge.OpenRequest{Repo: repo, Head: "sbx/box3", Base: "main", Title: "box3"})
	if err != nil || pr3.HeadSHA != push3 {
		t.Fatalf("Open box3 = %+v, %v", pr3, err)
	}

	// The head moves: a merge for the head the caller saw is refused.
	sha2 := pushBranch(t, srv, repo, "sbx/box1", map[string]string{"box1.txt": "box1, again\n"})
	waitPR(t, f, tok, repo, pr.Number, "head moves to "+sha2, func(p forge.PullRequest) bool { return p.HeadSHA == sha2 && p.Mergeable == forge.MergeableYes })
	_, err = f.Merge(ctx, tok, repo, pr.Number, forge.Squash, sha1)
	wantKind(t, "Merge with a stale head", err, errkind.Conflict)
	if st, _ := f.Get(ctx, tok, repo, pr.Number); st.State != forge.StateOpen {
		t.Fatalf("after a refused merge the pull request is %s", st.State)
	}

	// Squash with the current head: merged, and main has the change.
	merged, err := f.Merge(ctx, tok, repo, pr.Number, forge.Squash, sha2)
	if err != nil || merged.State != forge.StateMerged || merged.MergeSHA == "" || merged.MergedAt.IsZero() {
		t.Fatalf("Merge = %+v, %v; want merged", merged, err)
	}
	if head := srv.BranchSHA(t, repo, "main"); head == mainSHA || head != merged.MergeSHA {
		t.Fatalf("main is at %s after the merge (was %s), merge sha %s", head, mainSHA, merged.MergeSHA)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gittest.Git(t, t.TempDir(), "clone", "-q", srv.AuthCloneURL(repo, "x-access-token", tok), clone)
	if b, err := os.ReadFile(filepath.Join(clone, "box1.txt")); err != nil || string(b) != "box1, again\n" {
		t.Fatalf("main's box1.txt = %q, %v", b, err)
	}
	if n := gittest.Git(t, clone, "rev-list", "--count", mainSHA+"..HEAD"); n != "1" {
		t.Fatalf("a squash merge left %s commits on main, want 1", n)
	}
	_, err = f.Merge(ctx, tok, repo, pr.Number, forge.Merge, "")
	wantKind(t, "Merge of a merged pull request", err, errkind.Conflict)

	// box3 now conflicts: Gitea reports it, and refuses to merge it.
	waitPR(t, f, tok, repo, pr3.Number, "conflict", func(p forge.PullRequest) bool { return p.Mergeable == forge.MergeableConflict })
	_, err = f.Merge(ctx, tok, repo, pr3.Number, forge.Merge, "")
	wantKind(t, "Merge of a conflicting pull request", err, errkind.Conflict)

	// A draft: "WIP:" in Gitea; closing it.
	pushBranch(t, srv, repo, "sbx/box2", map[string]string{"box2.txt": "box2\n"})
	draft, opened, err := f.Open(ctx, tok, forge.OpenRequest{Repo: repo, Head: "sbx/box2", Title: "box2", Draft: true})
	if err != nil || !opened || !draft.Draft || draft.Mergeable != forge.MergeableUnknown {
		t.Fatalf("Open draft = %+v, %v, %v; want a draft", draft, opened, err)
	}
	_, err = f.Merge(ctx, tok, repo, draft.Number, forge.Merge, "")
	wantKind(t, "Merge of a draft", err, errkind.Conflict)
	closed, err := f.Close(ctx, tok, repo, draft.Number)
	if err != nil || closed.State != forge.StateClosed || closed.Number != draft.Number {
		t.Fatalf("Close = %+v, %v", closed, err)
	}
	if got, err := f.Get(ctx, tok, repo, draft.Number); err != nil || got.State != forge.StateClosed {
		t.Fatalf("Get after Close = %s, %v", got.State, err)
	}
	reopened, opened, err := f.Open(ctx, tok, forge.OpenRequest{Repo: repo, Head: "sbx/box2", Title: "box2 again"})
	if err != nil || !opened || reopened.Number == draft.Number {
		t.Fatalf("Open after Close = #%d, %v, %v; want a new pull request", reopened.Number, opened, err)
	}

	// Repos: a query on the name, on owner/name, a limit, newest first.
	srv.CreateRepo(t, "gadget", nil)
	list, err := f.Repos(ctx, tok, "WIDG", 10)
	if err != nil || len(list) != 1 || list[0].Repo != repo || !list[0].Private || list[0].DefaultBranch != "main" ||
		list[0].URL != srv.URL+"/"+repo.String() || list[0].Updated.IsZero() {
		t.Fatalf("Repos(WIDG) = %+v, %v", list, err)
	}
	list, err = f.Repos(ctx, tok, srv.Admin+"/", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("Repos(%s/) = %+v, %v; want both", srv.Admin, list, err)
	}
	for i := 1; i < len(list); i++ {
		if list[i].Updated.After(list[i-1].Updated) {
			t.Fatalf("Repos not newest first: %+v", list)
		}
	}
	if list, err = f.Repos(ctx, tok, "", 1); err != nil || len(list) != 1 {
		t.Fatalf("Repos limit 1 = %+v, %v", list, err)
	}
	if list, err = f.Repos(ctx, tok, "nosuchthing", 10); err != nil || len(list) != 0 {
		t.Fatalf("Repos(nosuchthing) = %+v, %v", list, err)
	}

	// Errors the core tells apart.
	_, err = f.Get(ctx, tok, forge.Repo{Owner: srv.Admin, Name: "nosuch"}, 1)
	wantKind(t, "Get on an unknown repository", err, errkind.NotFound)
	_, err = f.Get(ctx, tok, repo, 999)
	wantKind(t, "Get of an unknown pull request", err, errkind.NotFound)
	const badToken = "0123456789abcdef0123456789abcdef01234567"
	_, err = f.Get(ctx, badToken, repo, pr.Number)
	wantKind(t, "a rejected token", err, errkind.Invalid)
	if !strings.Contains(err.Error(), "token rejected") || strings.Contains(err.Error(), badToken) {
		t.Fatalf("a rejected token's error %q: want \"token rejected\", without the token", err)
	}
	other := srv.NewUserToken(t, "mallory")
	_, err = f.Merge(ctx, other, repo, pr3.Number, forge.Merge, "")
	wantKind(t, "another user's token merging a private repository's pull request", err, errkind.NotFound)
	if list, err := f.Repos(ctx, other, "", 10); err != nil || len(list) != 0 {
		t.Fatalf("another user's Repos = %+v, %v; want none of the admin's private ones", list, err)
	}
	// Made public, the repository is visible to her, but not hers to merge.
	srv.API(t, "PATCH", "/repos/"+repo.String(), map[string]any{"private": false}, nil)
	if _, err := f.Get(ctx, other, repo, pr3.Number); err != nil {
		t.Fatalf("another user's Get on a public repository: %v", err)
	}
	_, err = f.Merge(ctx, other, repo, pr3.Number, forge.Merge, "")
	wantKind(t, "another user's token merging a public repository's pull request", err, errkind.Forbidden)

	// Her reviews count: changes requested, then approved.
	reviews := "/repos/" + repo.String() + "/pulls/" + strconv.Itoa(pr3.Number) + "/reviews"
	srv.APIAs(t, other, "POST", reviews, map[string]string{"event": "REQUEST_CHANGES", "body": "no"}, nil)
	if got, err := f.Get(ctx, tok, repo, pr3.Number); err != nil || got.Review != forge.ReviewChangesRequested {
		t.Fatalf("review after changes requested = %q, %v", got.Review, err)
	}
	srv.APIAs(t, other, "POST", reviews, map[string]string{"event": "APPROVED", "body": "fine"}, nil)
	if got, err := f.Get(ctx, tok, repo, pr3.Number); err != nil || got.Review != forge.ReviewApproved {
		t.Fatalf("review after approval = %q, %v", got.Review, err)
	}
	_, err = f.Close(ctx, other, repo, pr3.Number)
	wantKind(t, "another user's token closing a public repository's pull request", err, errkind.Forbidden)

	// Requests the host refuses, and ones refused before asking.
	_, _, err = f.Open(ctx, tok, forge.OpenRequest{Repo: repo, Head: "main", Title: "nothing"})
	wantKind(t, "Open from the base itself", err, errkind.Invalid)
	_, _, err = f.Open(ctx, tok, forge.OpenRequest{Repo: repo, Head: "sbx/nosuch", Title: "x"})
	if errkind.Of(err) != errkind.NotFound && errkind.Of(err) != errkind.Invalid {
		t.Fatalf("Open from a missing branch: %v, want not found or invalid", err)
	}
	for name, r := range map[string]forge.OpenRequest{
		"no title":         {Repo: repo, Head: "sbx/box1"},
		"bad head":         {Repo: repo, Head: "sbx/a..b", Title: "x"},
		"option head":      {Repo: repo, Head: "--upload-pack=x", Title: "x"},
		"bad base":         {Repo: repo, Head: "sbx/box1", Base: "a b", Title: "x"},
		"owner with slash": {Repo: forge.Repo{Owner: "a/b", Name: "c"}, Head: "sbx/box1", Title: "x"},
		"dot-dot name":     {Repo: forge.Repo{Owner: "a", Name: ".."}, Head: "sbx/box1", Title: "x"},
	} {
		_, _, err := f.Open(ctx, tok, r)
		wantKind(t, "Open with "+name, err, errkind.Invalid)
	}
	_, err = f.Merge(ctx, tok, repo, pr3.Number, "octopus", "")
	wantKind(t, "Merge with an unknown method", err, errkind.Invalid)
	_, err = f.Merge(ctx, tok, repo, pr3.Number, forge.Merge, "not-a-sha")
	wantKind(t, "Merge with a bad sha", err, errkind.Invalid)
	_, err = f.Get(ctx, tok, repo, 0)
	wantKind(t, "Get #0", err, errkind.Invalid)
	_, err = f.Repos(ctx, tok, "", 0)
	wantKind(t, "Repos limit 0", err, errkind.Invalid)
	_, err = f.Get(ctx, "", repo, 1)
	wantKind(t, "no token", err, errkind.Invalid)
}

// TestGiteaUnreachable: a host that does not answer is Unavailable, and
// the error names neither the token nor hangs past the client's timeout.
func TestGiteaUnreachable(t *testing.T) {
	base, _ := url.Parse("http://127.0.0.1:1")
	f := forge.NewGitea(base, nil)
	const tok = "secret-token-value"
	_, err := f.Get(context.Background(), tok, forge.Repo{Owner: "a", Name: "b"}, 1)
	wantKind(t, "unreachable host", err, errkind.Unavailable)
	if strings.Contains(err.Error(), tok) {
		t.Fatalf("error %q holds the token", err)
	}
	if !errors.Is(err, errkind.Unavailable) {
		t.Fatal(err)
	}
}

// TestGiteaReadsEveryPageOfChecks: a commit with more statuses than one
// page of Gitea's answers (50) shows every check on the card, not the first
// page's.
func TestGiteaReadsEveryPageOfChecks(t *testing.T) {
	ctx := context.Background()
	srv := giteatest.New(t)
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := forge.NewGitea(base, nil)
	repo := srv.CreateRepo(t, "many", map[string]string{"README.md": "one\n"})
	sha := pushBranch(t, srv, repo, "sbx/many", map[string]string{"many.txt": "many\n"})
	pr, _, err := f.Open(ctx, srv.Token, forge.OpenRequest{Repo: repo, Head: "sbx/many", Title: "many checks"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 57
	for i := range n {
		outcome := "success"
		if i == n-1 {
			outcome = "failure" // on the last page: a card reading one page would say success
		}
		srv.SetStatus(t, repo, sha, outcome, fmt.Sprintf("ci/job-%02d", i))
	}
	got, err := f.Get(ctx, srv.Token, repo, pr.Number)
	if err != nil || len(got.Checks) != n || forge.ChecksOutcome(got.Checks) != forge.CheckFailure {
		t.Fatalf("Get = %d checks (outcome %s), %v; want %d, failure", len(got.Checks), forge.ChecksOutcome(got.Checks), err, n)
	}
}
