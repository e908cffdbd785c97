package forge_test

// The contract of sbx with GitHub's REST API: a real HTTP server plays
// GitHub from the answers its documentation gives (testdata/github, see its
// README), and every request sbx makes is checked against what the
// documentation asks for: method, path, query, headers and JSON body.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/errkind"
)

const (
	ghToken   = "ghp_TestTokenAAAAbbbbCCCCddddEEEEffff0000"
	ghHeadSHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e" // the documented pull request's head
)

var ghRepo = forge.Repo{Owner: "octocat", Name: "Hello-World"}

// ghDoc is a documented answer from testdata/github.
func ghDoc(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "github", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ghDocWith is a documented object answer with some fields changed.
func ghDocWith(t testing.TB, name string, change map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ghDoc(t, name), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range change {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ghCall is one request the server saw.
type ghCall struct {
	Method, Path string
	Query        url.Values
	Header       http.Header
	Host         string
	Body         map[string]any
}

func (c ghCall) String() string { return c.Method + " " + c.Path + "?" + c.Query.Encode() }

// ghAnswer is what the server answers one endpoint with.
type ghAnswer struct {
	status int
	header map[string]string
	body   []byte
}

// ghServer plays GitHub's REST API under prefix ("/api/v3" for GitHub
// Enterprise Server): routes are "METHOD /path" (without the prefix), each
// answering its documented body.
type ghServer struct {
	t      testing.TB
	srv    *httptest.Server
	prefix string
	token  string

	mu     sync.Mutex
	routes map[string]func(r *http.Request) ghAnswer
	any    func(r *http.Request) ghAnswer // when set, answers every request
	calls  []ghCall
}

func newGHServer(t testing.TB) *ghServer {
	s := &ghServer{t: t, prefix: "/api/v3", token: ghToken, routes: map[string]func(*http.Request) ghAnswer{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// on answers "METHOD /path" with status and a body.
func (s *ghServer) on(route string, status int, body []byte) {
	s.handle(route, func(*http.Request) ghAnswer { return ghAnswer{status: status, body: body} })
}

func (s *ghServer) handle(route string, f func(r *http.Request) ghAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes[route] = f
}

// card answers the four reads of a pull request's card with the
// documented bodies, the pull request changed by change.
func (s *ghServer) card(t testing.TB, change map[string]any) {
	base := "/repos/octocat/Hello-World"
	s.on("GET "+base+"/pulls/1347", 200, ghDocWith(t, "pulls-get.json", change))
	s.on("GET "+base+"/pulls/1347/reviews", 200, ghDoc(t, "pulls-reviews.json"))
	s.on("GET "+base+"/commits/"+ghHeadSHA+"/check-runs", 200, ghDoc(t, "commits-check-runs.json"))
	s.on("GET "+base+"/commits/"+ghHeadSHA+"/status", 200, ghDoc(t, "commits-status.json"))
}

func (s *ghServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t := s.t
	s.mu.Unlock()
	call := ghCall{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Host: r.Host}
	if b, _ := io.ReadAll(r.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &call.Body); err != nil {
			t.Errorf("%s: body is not a JSON object: %q", call, b)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", call, ct)
		}
	}
	// Every request: the token as GitHub documents it, the media type
	// and the API version.
	if got := r.Header.Get("Authorization"); got != "Bearer "+s.token {
		t.Errorf("%s: Authorization %q, want Bearer and the token", call, got)
	}
	if got := r.Header.Get("Accept"); got != "application/vnd.github+json" {
		t.Errorf("%s: Accept %q, want application/vnd.github+json", call, got)
	}
	if got := r.Header.Get("X-GitHub-Api-Version"); got != "2022-11-28" {
		t.Errorf("%s: X-GitHub-Api-Version %q, want 2022-11-28", call, got)
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	route, ok := s.routes[r.Method+" "+strings.TrimPrefix(r.URL.Path, s.prefix)]
	if !strings.HasPrefix(r.URL.Path, s.prefix+"/") {
		ok = false
	}
	if s.any != nil {
		route, ok = s.any, true
	}
	s.mu.Unlock()
	a := ghAnswer{status: 404, body: ghDoc(t, "error-404.json")}
	if ok {
		a = route(r)
	} else {
		t.Errorf("%s: not an endpoint this test serves", call)
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// took returns the requests so far, as "METHOD /path?query", and forgets
// them.
func (s *ghServer) took() []ghCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

func ghLines(calls []ghCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.String())
	}
	return out
}

func (s *ghServer) forge(t testing.TB) forge.Forge {
	t.Helper()
	base, err := url.Parse(s.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	f, err := forge.NewGitHub(base, s.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind() != forge.GitHub {
		t.Fatalf("Kind = %q", f.Kind())
	}
	return f
}

// ghCardCalls are the requests Get makes for the documented pull request.
var ghCardCalls = []string{
	"GET /api/v3/repos/octocat/Hello-World/pulls/1347?",
	"GET /api/v3/repos/octocat/Hello-World/pulls/1347/reviews?per_page=100",
	"GET /api/v3/repos/octocat/Hello-World/commits/" + ghHeadSHA + "/check-runs?per_page=100",
	"GET /api/v3/repos/octocat/Hello-World/commits/" + ghHeadSHA + "/status?per_page=100",
}

func ghWantCalls(t *testing.T, got []ghCall, want ...string) {
	t.Helper()
	if g := ghLines(got); !slices.Equal(g, want) {
		t.Fatalf("requests:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

// ghWantDocumentedPR checks the card of the documented pull request.
func ghWantDocumentedPR(t *testing.T, pr forge.PullRequest) {
	t.Helper()
	want := forge.PullRequest{
		Repo: ghRepo, Number: 1347, URL: "https://github.com/octocat/Hello-World/pull/1347",
		Title: "Amazing new feature", Body: "Please pull these awesome changes in!", State: forge.StateOpen,
		Head: "new-topic", HeadSHA: ghHeadSHA, Base: "master", Mergeable: forge.MergeableYes,
		Review: forge.ReviewApproved, Author: "octocat",
		Created: time.Date(2011, 1, 26, 19, 1, 12, 0, time.UTC), Updated: time.Date(2011, 1, 26, 19, 1, 12, 0, time.UTC),
	}
	checks := []forge.Check{
		{Name: "mighty_readme", Outcome: forge.CheckNeutral, Detail: "neutral: Mighty Readme report", URL: "https://github.com/github/hello-world/runs/4"},
		{Name: "continuous-integration/jenkins", Outcome: forge.CheckSuccess, Detail: "success: Build has completed successfully", URL: "https://ci.example.com/1000/output"},
		{Name: "security/brakeman", Outcome: forge.CheckSuccess, Detail: "success: Testing has completed successfully", URL: "https://ci.example.com/2000/output"},
	}
	got := pr
	got.Checks = nil
	if !got.Created.Equal(want.Created) || !got.Updated.Equal(want.Updated) {
		t.Errorf("times %v %v", got.Created, got.Updated)
	}
	got.Created, got.Updated = want.Created, want.Updated
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("card:\n got %+v\nwant %+v", got, want)
	}
	if !slices.Equal(pr.Checks, checks) {
		t.Errorf("checks:\n got %+v\nwant %+v", pr.Checks, checks)
	}
	if o := forge.ChecksOutcome(pr.Checks); o != forge.CheckSuccess {
		t.Errorf("ChecksOutcome = %q", o)
	}
}

func TestGitHubOpenNew(t *testing.T) {
	s := newGHServer(t)
	s.on("GET /repos/octocat/Hello-World/pulls", 200, []byte("[]"))
	s.on("POST /repos/octocat/Hello-World/pulls", 201, ghDoc(t, "pulls-get.json"))
	s.card(t, nil)
	pr, opened, err := s.forge(t).Open(context.Background(), ghToken, forge.OpenRequest{
		Repo: ghRepo, Head: "new-topic", Base: "master", Title: "  Amazing new feature ", Body: "Please pull these awesome changes in!", Draft: true,
	})
	if err != nil || !opened {
		t.Fatalf("Open = %v, %v", opened, err)
	}
	calls := s.took()
	ghWantCalls(t, calls, append([]string{
		"GET /api/v3/repos/octocat/Hello-World/pulls?head=octocat%3Anew-topic&state=open",
		"POST /api/v3/repos/octocat/Hello-World/pulls?",
	}, ghCardCalls...)...)
	want := map[string]any{"title": "Amazing new feature", "head": "new-topic", "base": "master", "body": "Please pull these awesome changes in!", "draft": true}
	if fmt.Sprint(calls[1].Body) != fmt.Sprint(want) {
		t.Fatalf("POST body %v, want %v", calls[1].Body, want)
	}
	ghWantDocumentedPR(t, pr)
}

// TestGitHubOpenExisting: an open pull request from the head is the
// answer; none is created.
func TestGitHubOpenExisting(t *testing.T) {
	s := newGHServer(t)
	s.on("GET /repos/octocat/Hello-World/pulls", 200, ghDoc(t, "pulls-list.json"))
	s.card(t, nil)
	pr, opened, err := s.forge(t).Open(context.Background(), ghToken, forge.OpenRequest{Repo: ghRepo, Head: "new-topic", Title: "again"})
	if err != nil || opened {
		t.Fatalf("Open = %v, %v; want the open one", opened, err)
	}
	ghWantCalls(t, s.took(), append([]string{"GET /api/v3/repos/octocat/Hello-World/pulls?head=octocat%3Anew-topic&state=open"}, ghCardCalls...)...)
	ghWantDocumentedPR(t, pr)
}

// TestGitHubOpenDefaultBase: no base is the repository's default branch.
func TestGitHubOpenDefaultBase(t *testing.T) {
	s := newGHServer(t)
	s.on("GET /repos/octocat/Hello-World/pulls", 200, []byte("[]"))
	s.on("GET /repos/octocat/Hello-World", 200, ghDocWith(t, "repos-get.json", map[string]any{"default_branch": "trunk"}))
	s.on("POST /repos/octocat/Hello-World/pulls", 201, ghDoc(t, "pulls-get.json"))
	s.card(t, nil)
	_, opened, err := s.forge(t).Open(context.Background(), ghToken, forge.OpenRequest{Repo: ghRepo, Head: "new-topic", Title: "t"})
	if err != nil || !opened {
		t.Fatalf("Open = %v, %v", opened, err)
	}
	calls := s.took()
	ghWantCalls(t, calls, append([]string{
		"GET /api/v3/repos/octocat/Hello-World/pulls?head=octocat%3Anew-topic&state=open",
		"GET /api/v3/repos/octocat/Hello-World?",
		"POST /api/v3/repos/octocat/Hello-World/pulls?",
	}, ghCardCalls...)...)
	if calls[2].Body["base"] != "trunk" || calls[2].Body["draft"] != false {
		t.Fatalf("POST body %v, want base trunk, draft false", calls[2].Body)
	}
}

// TestGitHubGetChecks: every check-run conclusion and status state GitHub
// documents maps onto the four outcomes.
func TestGitHubGetChecks(t *testing.T) {
	runs := []struct{ status, conclusion, want string }{
		{"queued", "", forge.CheckPending},
		{"in_progress", "", forge.CheckPending},
		{"waiting", "", forge.CheckPending},
		{"requested", "", forge.CheckPending},
		{"pending", "", forge.CheckPending},
		{"completed", "success", forge.CheckSuccess},
		{"completed", "failure", forge.CheckFailure},
		{"completed", "timed_out", forge.CheckFailure},
		{"completed", "cancelled", forge.CheckFailure},
		{"completed", "action_required", forge.CheckFailure},
		{"completed", "startup_failure", forge.CheckFailure},
		{"completed", "neutral", forge.CheckNeutral},
		{"completed", "skipped", forge.CheckNeutral},
		{"completed", "stale", forge.CheckNeutral},
		{"completed", "a-word-from-the-future", forge.CheckFailure},
	}
	states := []struct{ state, want string }{
		{"pending", forge.CheckPending},
		{"success", forge.CheckSuccess},
		{"failure", forge.CheckFailure},
		{"error", forge.CheckFailure},
	}
	var doc struct {
		CheckRuns []map[string]any `json:"check_runs"`
	}
	if err := json.Unmarshal(ghDoc(t, "commits-check-runs.json"), &doc); err != nil {
		t.Fatal(err)
	}
	var checkRuns []map[string]any
	for i, r := range runs {
		run := map[string]any{}
		for k, v := range doc.CheckRuns[0] {
			run[k] = v
		}
		run["name"], run["status"], run["conclusion"] = fmt.Sprintf("run%d", i), r.status, nil
		if r.conclusion != "" {
			run["conclusion"] = r.conclusion
		}
		checkRuns = append(checkRuns, run)
	}
	var status struct {
		Statuses []map[string]any `json:"statuses"`
	}
	if err := json.Unmarshal(ghDoc(t, "commits-status.json"), &status); err != nil {
		t.Fatal(err)
	}
	var statuses []map[string]any
	for i, st := range states {
		s := map[string]any{}
		for k, v := range status.Statuses[0] {
			s[k] = v
		}
		s["context"], s["state"] = fmt.Sprintf("status%d", i), st.state
		statuses = append(statuses, s)
	}
	s := newGHServer(t)
	s.card(t, nil)
	runsBody, _ := json.Marshal(map[string]any{"total_count": len(checkRuns), "check_runs": checkRuns})
	s.on("GET /repos/octocat/Hello-World/commits/"+ghHeadSHA+"/check-runs", 200, runsBody)
	s.on("GET /repos/octocat/Hello-World/commits/"+ghHeadSHA+"/status", 200, ghDocWith(t, "commits-status.json", map[string]any{"statuses": statuses, "state": "failure"}))
	pr, err := s.forge(t).Get(context.Background(), ghToken, ghRepo, 1347)
	if err != nil {
		t.Fatal(err)
	}
	ghWantCalls(t, s.took(), ghCardCalls...)
	if len(pr.Checks) != len(runs)+len(states) {
		t.Fatalf("%d checks, want %d: %+v", len(pr.Checks), len(runs)+len(states), pr.Checks)
	}
	for i, r := range runs {
		c := pr.Checks[i]
		word := r.conclusion
		if word == "" {
			word = r.status
		}
		if c.Name != fmt.Sprintf("run%d", i) || c.Outcome != r.want || !strings.HasPrefix(c.Detail, word+": ") {
			t.Errorf("check run %s/%s = %+v, want outcome %s", r.status, r.conclusion, c, r.want)
		}
	}
	for i, st := range states {
		c := pr.Checks[len(runs)+i]
		if c.Name != fmt.Sprintf("status%d", i) || c.Outcome != st.want || c.Detail != st.state+": Build has completed successfully" || c.URL != "https://ci.example.com/1000/output" {
			t.Errorf("status %s = %+v, want outcome %s", st.state, c, st.want)
		}
	}
	if o := forge.ChecksOutcome(pr.Checks); o != forge.CheckFailure {
		t.Errorf("ChecksOutcome = %q, want failure", o)
	}
}

// TestGitHubGetReview: the latest verdict per reviewer counts; a later
// comment does not cancel it, a dismissal does; any standing request for
// changes wins.
func TestGitHubGetReview(t *testing.T) {
	type rv struct{ who, state string }
	for _, tc := range []struct {
		name    string
		reviews []rv
		want    string
	}{
		{"none", nil, forge.ReviewNone},
		{"only comments", []rv{{"a", "COMMENTED"}, {"b", "PENDING"}}, forge.ReviewNone},
		{"approved", []rv{{"a", "APPROVED"}}, forge.ReviewApproved},
		{"approved then commented", []rv{{"a", "APPROVED"}, {"a", "COMMENTED"}}, forge.ReviewApproved},
		{"changes then approved", []rv{{"a", "CHANGES_REQUESTED"}, {"a", "APPROVED"}}, forge.ReviewApproved},
		{"approved then changes", []rv{{"a", "APPROVED"}, {"a", "CHANGES_REQUESTED"}}, forge.ReviewChangesRequested},
		{"one approves, another asks changes", []rv{{"a", "APPROVED"}, {"b", "CHANGES_REQUESTED"}, {"b", "COMMENTED"}}, forge.ReviewChangesRequested},
		{"changes dismissed", []rv{{"a", "APPROVED"}, {"b", "CHANGES_REQUESTED"}, {"b", "DISMISSED"}}, forge.ReviewApproved},
		{"approval dismissed", []rv{{"a", "APPROVED"}, {"a", "DISMISSED"}}, forge.ReviewNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc []map[string]any
			if err := json.Unmarshal(ghDoc(t, "pulls-reviews.json"), &doc); err != nil {
				t.Fatal(err)
			}
			reviews := []map[string]any{}
			for i, r := range tc.reviews {
				m := map[string]any{}
				for k, v := range doc[0] {
					m[k] = v
				}
				m["id"], m["user"], m["state"] = 80+i, map[string]any{"login": r.who}, r.state
				reviews = append(reviews, m)
			}
			body, _ := json.Marshal(reviews)
			s := newGHServer(t)
			s.card(t, nil)
			s.on("GET /repos/octocat/Hello-World/pulls/1347/reviews", 200, body)
			pr, err := s.forge(t).Get(context.Background(), ghToken, ghRepo, 1347)
			if err != nil {
				t.Fatal(err)
			}
			if pr.Review != tc.want {
				t.Fatalf("Review = %q, want %q", pr.Review, tc.want)
			}
		})
	}
}

// TestGitHubGetStateAndMergeable: state, merged and mergeable map onto the
// card's words.
func TestGitHubGetStateAndMergeable(t *testing.T) {
	const mergeSHA = "e5bd3914e2e596debea16f433f57875b5b90bcd6"
	for _, tc := range []struct {
		name                      string
		change                    map[string]any
		state, mergeable, mergeSH string
	}{
		{"documented", nil, forge.StateOpen, forge.MergeableYes, ""},
		{"mergeable null", map[string]any{"mergeable": nil, "mergeable_state": "unknown"}, forge.StateOpen, forge.MergeableUnknown, ""},
		{"conflict", map[string]any{"mergeable": false, "mergeable_state": "dirty"}, forge.StateOpen, forge.MergeableConflict, ""},
		{"blocked but mergeable", map[string]any{"mergeable": true, "mergeable_state": "blocked"}, forge.StateOpen, forge.MergeableYes, ""},
		{"closed", map[string]any{"state": "closed", "merged_at": nil, "mergeable": nil}, forge.StateClosed, forge.MergeableUnknown, ""},
		{"merged", map[string]any{"state": "closed", "merged": true, "mergeable": nil}, forge.StateMerged, forge.MergeableUnknown, mergeSHA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newGHServer(t)
			s.card(t, tc.change)
			pr, err := s.forge(t).Get(context.Background(), ghToken, ghRepo, 1347)
			if err != nil {
				t.Fatal(err)
			}
			if pr.State != tc.state || pr.Mergeable != tc.mergeable || pr.MergeSHA != tc.mergeSH {
				t.Fatalf("state %q mergeable %q merge sha %q; want %q %q %q", pr.State, pr.Mergeable, pr.MergeSHA, tc.state, tc.mergeable, tc.mergeSH)
			}
			if tc.state == forge.StateMerged && !pr.MergedAt.Equal(time.Date(2011, 1, 26, 19, 1, 12, 0, time.UTC)) {
				t.Fatalf("MergedAt = %v", pr.MergedAt)
			}
		})
	}
}

func TestGitHubMerge(t *testing.T) {
	const route = "PUT /repos/octocat/Hello-World/pulls/1347/merge"
	t.Run("ok", func(t *testing.T) {
		s := newGHServer(t)
		s.on(route, 200, ghDoc(t, "pulls-merge.json"))
		s.card(t, map[string]any{"state": "closed", "merged": true})
		pr, err := s.forge(t).Merge(context.Background(), ghToken, ghRepo, 1347, forge.Squash, ghHeadSHA)
		if err != nil {
			t.Fatal(err)
		}
		calls := s.took()
		ghWantCalls(t, calls, append([]string{"PUT /api/v3/repos/octocat/Hello-World/pulls/1347/merge?"}, ghCardCalls...)...)
		want := map[string]any{"merge_method": "squash", "sha": ghHeadSHA}
		if fmt.Sprint(calls[0].Body) != fmt.Sprint(want) {
			t.Fatalf("PUT body %v, want %v", calls[0].Body, want)
		}
		if pr.State != forge.StateMerged || pr.MergeSHA != "e5bd3914e2e596debea16f433f57875b5b90bcd6" {
			t.Fatalf("after merge: %+v", pr)
		}
	})
	t.Run("default method, no sha", func(t *testing.T) {
		s := newGHServer(t)
		s.on(route, 200, ghDoc(t, "pulls-merge.json"))
		s.card(t, map[string]any{"merged": true})
		if _, err := s.forge(t).Merge(context.Background(), ghToken, ghRepo, 1347, "", ""); err != nil {
			t.Fatal(err)
		}
		if body := s.took()[0].Body; fmt.Sprint(body) != fmt.Sprint(map[string]any{"merge_method": "merge"}) {
			t.Fatalf("PUT body %v", body)
		}
	})
	for _, tc := range []struct {
		status int
		file   string
		msg    string
	}{
		{405, "pulls-merge-405.json", "Pull Request is not mergeable"},
		{409, "pulls-merge-409.json", "Head branch was modified. Review and try the merge again."},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			s := newGHServer(t)
			s.on(route, tc.status, ghDoc(t, tc.file))
			_, err := s.forge(t).Merge(context.Background(), ghToken, ghRepo, 1347, forge.Rebase, ghHeadSHA)
			if errkind.Of(err) != errkind.Conflict || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Merge = %v; want Conflict saying %q", err, tc.msg)
			}
			ghWantCalls(t, s.took(), "PUT /api/v3/repos/octocat/Hello-World/pulls/1347/merge?")
		})
	}
}

func TestGitHubClose(t *testing.T) {
	s := newGHServer(t)
	closed := ghDocWith(t, "pulls-get.json", map[string]any{"state": "closed", "merged_at": nil, "mergeable": nil})
	s.on("PATCH /repos/octocat/Hello-World/pulls/1347", 200, closed)
	s.card(t, map[string]any{"state": "closed", "merged_at": nil, "mergeable": nil})
	pr, err := s.forge(t).Close(context.Background(), ghToken, ghRepo, 1347)
	if err != nil {
		t.Fatal(err)
	}
	calls := s.took()
	ghWantCalls(t, calls, append([]string{"PATCH /api/v3/repos/octocat/Hello-World/pulls/1347?"}, ghCardCalls...)...)
	if fmt.Sprint(calls[0].Body) != fmt.Sprint(map[string]any{"state": "closed"}) {
		t.Fatalf("PATCH body %v", calls[0].Body)
	}
	if pr.State != forge.StateClosed {
		t.Fatalf("State = %q", pr.State)
	}
}

// TestGitHubRepos: the token's repositories, most recently updated first,
// page after page (GitHub's Link header) until limit matches are found.
func TestGitHubRepos(t *testing.T) {
	var item map[string]any
	var doc []map[string]any
	if err := json.Unmarshal(ghDoc(t, "user-repos.json"), &doc); err != nil {
		t.Fatal(err)
	}
	item = doc[0]
	page := func(from, n int) []byte {
		var out []map[string]any
		for i := from; i < from+n; i++ {
			m := map[string]any{}
			for k, v := range item {
				m[k] = v
			}
			owner := "octocat"
			if i%2 == 1 {
				owner = "Acme"
			}
			m["name"], m["full_name"], m["owner"] = fmt.Sprintf("Repo-%d", i), fmt.Sprintf("%s/Repo-%d", owner, i), map[string]any{"login": owner}
			m["html_url"] = fmt.Sprintf("https://github.com/%s/Repo-%d", owner, i)
			out = append(out, m)
		}
		b, _ := json.Marshal(out)
		return b
	}
	s := newGHServer(t)
	s.handle("GET /user/repos", func(r *http.Request) ghAnswer {
		// The Link header's address is GitHub's to choose: only its page
		// number is taken, so the next page is asked of the same API.
		next := func(p int) map[string]string {
			return map[string]string{"Link": fmt.Sprintf(`<https://elsewhere.example/api/v3/user/repos?sort=updated&per_page=100&page=%d>; rel="next", <https://elsewhere.example/api/v3/user/repos?sort=updated&per_page=100&page=3>; rel="last"`, p)}
		}
		switch r.URL.Query().Get("page") {
		case "":
			return ghAnswer{status: 200, body: page(0, 100), header: next(2)}
		case "2":
			return ghAnswer{status: 200, body: page(100, 100), header: next(3)}
		case "3":
			return ghAnswer{status: 200, body: page(200, 10)}
		}
		return ghAnswer{status: 404, body: ghDoc(t, "error-404.json")}
	})
	f := s.forge(t)

	all, err := f.Repos(context.Background(), ghToken, "", 1000)
	if err != nil || len(all) != 210 {
		t.Fatalf("Repos = %d, %v; want 210", len(all), err)
	}
	ghWantCalls(t, s.took(),
		"GET /api/v3/user/repos?per_page=100&sort=updated",
		"GET /api/v3/user/repos?page=2&per_page=100&sort=updated",
		"GET /api/v3/user/repos?page=3&per_page=100&sort=updated")
	want := forge.RepoInfo{Repo: forge.Repo{Owner: "octocat", Name: "Repo-0"}, Description: "This your first repo!", DefaultBranch: "master",
		URL: "https://github.com/octocat/Repo-0", Updated: time.Date(2011, 1, 26, 19, 14, 43, 0, time.UTC)}
	if fmt.Sprintf("%+v", all[0]) != fmt.Sprintf("%+v", want) {
		t.Fatalf("first = %+v, want %+v", all[0], want)
	}

	// The query is case-insensitive on owner/name; the limit stops the
	// paging as soon as it is met.
	got, err := f.Repos(context.Background(), ghToken, "ACME/repo-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Repo.String())
	}
	if !slices.Equal(names, []string{"Acme/Repo-1", "Acme/Repo-11", "Acme/Repo-13"}) {
		t.Fatalf("Repos(ACME/repo-1, 3) = %v", names)
	}
	ghWantCalls(t, s.took(), "GET /api/v3/user/repos?per_page=100&sort=updated")

	got, err = f.Repos(context.Background(), ghToken, "octocat/repo-20", 5)
	if err != nil || len(got) != 5 || got[0].Repo.Name != "Repo-20" || got[1].Repo.Name != "Repo-200" {
		t.Fatalf("Repos(octocat/repo-20, 5) = %+v, %v", got, err)
	}
	if n := len(s.took()); n != 3 {
		t.Fatalf("%d pages read, want 3", n)
	}

	for _, limit := range []int{0, -1, 1001} {
		if _, err := f.Repos(context.Background(), ghToken, "", limit); errkind.Of(err) != errkind.Invalid {
			t.Errorf("limit %d: %v, want Invalid", limit, err)
		}
	}
	if calls := s.took(); len(calls) != 0 {
		t.Fatalf("bad limits made requests: %v", ghLines(calls))
	}
}

// TestGitHubEnterprisePath: GitHub Enterprise Server's API is under
// <base>/api/v3, also when the base has a path.
func TestGitHubEnterprisePath(t *testing.T) {
	s := newGHServer(t)
	s.prefix = "/ghe/api/v3"
	s.card(t, nil)
	base, _ := url.Parse(s.srv.URL + "/ghe/")
	f, err := forge.NewGitHub(base, s.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Get(context.Background(), ghToken, ghRepo, 1347); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.took() {
		if !strings.HasPrefix(c.Path, "/ghe/api/v3/repos/octocat/Hello-World/") {
			t.Fatalf("request %s outside /ghe/api/v3", c)
		}
	}
}

// TestGitHubDotCom: github.com's API is https://api.github.com: the client
// is pointed at a TLS server of the test for every address, and the
// requests it gets name api.github.com with no path prefix.
func TestGitHubDotCom(t *testing.T) {
	s := newGHServer(t)
	s.srv.Close()
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	s.prefix = ""
	s.card(t, nil)
	tr := s.srv.Client().Transport.(*http.Transport).Clone()
	addr := s.srv.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs, ServerName: "example.com"}
	base, _ := url.Parse("https://github.com")
	f, err := forge.NewGitHub(base, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := f.Get(context.Background(), ghToken, ghRepo, 1347)
	if err != nil {
		t.Fatal(err)
	}
	calls := s.took()
	if len(calls) != 4 || pr.Number != 1347 {
		t.Fatalf("calls %v", ghLines(calls))
	}
	for _, c := range calls {
		if c.Host != "api.github.com" || !strings.HasPrefix(c.Path, "/repos/") {
			t.Fatalf("request %s to host %q, want api.github.com/repos/...", c, c.Host)
		}
	}
}

// TestGitHubRedirectNotFollowed: a redirect answer is an error; the token
// never reaches where it points.
func TestGitHubRedirectNotFollowed(t *testing.T) {
	var (
		mu      sync.Mutex
		elsewhr []string
	)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		elsewhr = append(elsewhr, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Write([]byte("{}"))
	}))
	defer other.Close()
	for _, code := range []int{301, 302, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := newGHServer(t)
			redirect := func(*http.Request) ghAnswer {
				return ghAnswer{status: code, header: map[string]string{"Location": other.URL + "/steal"}, body: []byte(`{"message":"Moved Permanently"}`)}
			}
			s.handle("GET /repos/octocat/Hello-World/pulls/1347", redirect)
			s.handle("PUT /repos/octocat/Hello-World/pulls/1347/merge", redirect)
			f := s.forge(t)
			_, err := f.Get(context.Background(), ghToken, ghRepo, 1347)
			if errkind.Of(err) != errkind.Unavailable || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), other.URL+"/steal") {
				t.Fatalf("Get = %v; want Unavailable naming the redirect", err)
			}
			_, err = f.Merge(context.Background(), ghToken, ghRepo, 1347, forge.Merge, "")
			if errkind.Of(err) != errkind.Unavailable {
				t.Fatalf("Merge = %v; want Unavailable", err)
			}
			if n := len(s.took()); n != 2 {
				t.Fatalf("%d requests, want 2", n)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(elsewhr) != 0 {
		t.Fatalf("the redirect target got %v", elsewhr)
	}
}

// TestGitHubErrors: what GitHub answers maps onto an errkind, with
// GitHub's words, and never the token, even when the host repeats it.
func TestGitHubErrors(t *testing.T) {
	reset := time.Now().Add(42 * time.Minute).Truncate(time.Second)
	echo := func(file string) []byte {
		var m map[string]any
		if err := json.Unmarshal(ghDoc(t, file), &m); err != nil {
			t.Fatal(err)
		}
		m["message"] = fmt.Sprint(m["message"], " (token ", ghToken, ")")
		b, _ := json.Marshal(m)
		return b
	}
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   []byte
		kind   *errkind.Kind
		says   []string
	}{
		{"401", 401, nil, echo("error-401.json"), errkind.Invalid, []string{"token rejected by the git host", "Bad credentials"}},
		{"403", 403, nil, echo("error-403.json"), errkind.Forbidden, []string{"Resource not accessible by personal access token"}},
		{"403 rate limit", 403, map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10)}, echo("error-rate-limit.json"),
			errkind.Unavailable, []string{"rate limited", "API rate limit exceeded", reset.UTC().Format(time.DateTime)}},
		{"429 rate limit", 429, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10)}, echo("error-rate-limit.json"),
			errkind.Unavailable, []string{"rate limited", reset.UTC().Format(time.DateTime)}},
		{"403 secondary rate limit", 403, map[string]string{"Retry-After": "60"}, []byte(`{"message":"You have exceeded a secondary rate limit. ` + ghToken + `","documentation_url":"https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`),
			errkind.Unavailable, []string{"secondary rate limit", "1m0s"}},
		{"404", 404, nil, echo("error-404.json"), errkind.NotFound, []string{"Not Found"}},
		{"422", 422, nil, echo("error-422.json"), errkind.Invalid, []string{"Validation Failed", "No commits between master and new-topic"}},
		{"500", 500, nil, echo("error-500.json"), errkind.Unavailable, []string{"Server Error", "500"}},
		{"502 not JSON", 502, nil, []byte("<html>bad gateway " + ghToken + "</html>"), errkind.Unavailable, []string{"502"}},
		{"503", 503, nil, echo("error-500.json"), errkind.Unavailable, []string{"503"}},
		{"200 not JSON", 200, nil, []byte("not json " + ghToken), errkind.Unavailable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newGHServer(t)
			s.handle("GET /repos/octocat/Hello-World/pulls/1347", func(*http.Request) ghAnswer {
				return ghAnswer{status: tc.status, header: tc.header, body: tc.body}
			})
			_, err := s.forge(t).Get(context.Background(), ghToken, ghRepo, 1347)
			if errkind.Of(err) != tc.kind {
				t.Fatalf("Get = %v; want kind %v", err, tc.kind.Name())
			}
			for _, w := range tc.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), ghToken) || strings.Contains(fmt.Sprintf("%+v", err), ghToken) {
				t.Fatalf("the error shows the token: %v", err)
			}
			if n := len(s.took()); n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		s := newGHServer(t)
		f := s.forge(t)
		s.srv.Close()
		_, err := f.Get(context.Background(), ghToken, ghRepo, 1347)
		if errkind.Of(err) != errkind.Unavailable || strings.Contains(err.Error(), ghToken) {
			t.Fatalf("Get = %v; want Unavailable without the token", err)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		s := newGHServer(t)
		s.card(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.forge(t).Get(ctx, ghToken, ghRepo, 1347)
		if !errors.Is(err, context.Canceled) || errkind.Of(err) != errkind.Unavailable {
			t.Fatalf("Get = %v; want canceled", err)
		}
	})
}

// TestGitHubBadInput: what sbx would put into a path, a query or a header
// is checked first; a bad one is Invalid and nothing is sent.
func TestGitHubBadInput(t *testing.T) {
	s := newGHServer(t)
	f := s.forge(t)
	ctx := context.Background()
	open := func(req forge.OpenRequest) error {
		if req.Repo == (forge.Repo{}) {
			req.Repo = ghRepo
		}
		_, _, err := f.Open(ctx, ghToken, req)
		return err
	}
	get := func(token string, r forge.Repo, n int) error {
		_, err := f.Get(ctx, token, r, n)
		return err
	}
	merge := func(m forge.MergeMethod, sha string) error {
		_, err := f.Merge(ctx, ghToken, ghRepo, 1, m, sha)
		return err
	}
	_, closeErr := f.Close(ctx, ghToken, forge.Repo{Owner: "octocat", Name: "x?y"}, 1)
	_, reposErr := f.Repos(ctx, ghToken, strings.Repeat("q", 201), 10)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"empty token", get("", ghRepo, 1)},
		{"token with newline", get(ghToken+"\r\nX-Evil: 1", ghRepo, 1)},
		{"owner with slash", get(ghToken, forge.Repo{Owner: "a/b", Name: "c"}, 1)},
		{"repo dot-dot", get(ghToken, forge.Repo{Owner: "octocat", Name: ".."}, 1)},
		{"repo with query", closeErr},
		{"number zero", get(ghToken, ghRepo, 0)},
		{"merge method", merge("fast-forward", "")},
		{"merge sha", merge(forge.Merge, "HEAD")},
		{"head empty", open(forge.OpenRequest{Title: "t"})},
		{"head with colon", open(forge.OpenRequest{Head: "evil:main", Title: "t"})},
		{"head with space", open(forge.OpenRequest{Head: "a b", Title: "t"})},
		{"head dot-dot", open(forge.OpenRequest{Head: "a/../b", Title: "t"})},
		{"base option-like", open(forge.OpenRequest{Head: "sbx/box", Base: "-main", Title: "t"})},
		{"title empty", open(forge.OpenRequest{Head: "sbx/box", Title: "  "})},
		{"title too long", open(forge.OpenRequest{Head: "sbx/box", Title: strings.Repeat("x", 257)})},
		{"body too long", open(forge.OpenRequest{Head: "sbx/box", Title: "t", Body: strings.Repeat("x", 65537)})},
		{"body not UTF-8", open(forge.OpenRequest{Head: "sbx/box", Title: "t", Body: "\xff"})},
		{"repos query too long", reposErr},
	} {
		if errkind.Of(tc.err) != errkind.Invalid {
			t.Errorf("%s: %v; want Invalid", tc.name, tc.err)
		} else if strings.Contains(tc.err.Error(), ghToken) {
			t.Errorf("%s: the error shows the token: %v", tc.name, tc.err)
		}
	}
	if calls := s.took(); len(calls) != 0 {
		t.Fatalf("bad input made requests: %v", ghLines(calls))
	}
	for _, base := range []string{"ftp://example.com", "https://user:pw@example.com", "/relative", "https://example.com/?q=1"} {
		u, _ := url.Parse(base)
		if _, err := forge.NewGitHub(u, nil); errkind.Of(err) != errkind.Invalid || strings.Contains(fmt.Sprint(err), "pw") {
			t.Errorf("NewGitHub(%q) = %v; want Invalid", base, err)
		}
	}
	if _, err := forge.NewGitHub(nil, nil); errkind.Of(err) != errkind.Invalid {
		t.Errorf("NewGitHub(nil) = %v; want Invalid", err)
	}
}

// FuzzGitHubPullRequest: whatever GitHub answers for a pull request, its
// reviews, check runs and status, Get never panics, and the card keeps
// its invariants: known words only, http(s) links only, valid UTF-8,
// bounded text, no token.
func FuzzGitHubPullRequest(f *testing.F) {
	f.Add(ghDoc(f, "pulls-get.json"), ghDoc(f, "pulls-reviews.json"), ghDoc(f, "commits-check-runs.json"), ghDoc(f, "commits-status.json"))
	f.Add(ghDocWith(f, "pulls-get.json", map[string]any{"merged": true, "mergeable": nil, "html_url": "javascript:alert(1)", "title": "\x1b]8;;evil\x07"}),
		[]byte(`[{"user":null,"state":"APPROVED"},{"state":"CHANGES_REQUESTED"}]`),
		[]byte(`{"check_runs":[null,{"status":"completed","conclusion":"weird","html_url":"data:x"}]}`),
		[]byte(`{"statuses":[null,{"state":"error","target_url":"file:///etc/passwd"}]}`))
	f.Add([]byte(`{"number":1347,"head":{"sha":"zz"}}`), []byte(`{}`), []byte(`[]`), []byte(`null`))
	s := newGHServer(f)
	var bodies [4][]byte
	// The head sha comes from the fuzzed pull request: every path is
	// answered by its last part.
	s.any = func(r *http.Request) ghAnswer {
		i := 0
		switch p := r.URL.Path; {
		case strings.HasSuffix(p, "/reviews"):
			i = 1
		case strings.HasSuffix(p, "/check-runs"):
			i = 2
		case strings.HasSuffix(p, "/status"):
			i = 3
		}
		return ghAnswer{status: 200, body: bodies[i]}
	}
	fg := s.forge(f)
	known := func(s string, words ...string) bool { return slices.Contains(words, s) }
	link := func(s string) bool {
		return s == "" || strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://")
	}
	f.Fuzz(func(t *testing.T, pr, reviews, runs, status []byte) {
		s.mu.Lock()
		bodies = [4][]byte{pr, reviews, runs, status}
		s.t = t
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		card, err := fg.Get(ctx, ghToken, ghRepo, 1347)
		if calls := s.took(); ctx.Err() != nil {
			t.Fatalf("Get hung after %v: %v", ghLines(calls), err)
		}
		if err != nil {
			if errkind.Of(err) == nil || strings.Contains(err.Error(), ghToken) {
				t.Fatalf("error without a kind or with the token: %v", err)
			}
			return
		}
		if !known(card.State, forge.StateOpen, forge.StateClosed, forge.StateMerged) ||
			!known(card.Mergeable, forge.MergeableYes, forge.MergeableConflict, forge.MergeableUnknown) ||
			!known(card.Review, forge.ReviewNone, forge.ReviewApproved, forge.ReviewChangesRequested) {
			t.Fatalf("unknown word in %+v", card)
		}
		if card.Repo != ghRepo || !link(card.URL) || card.Checks == nil || utf8.RuneCountInString(card.Title) > 257 {
			t.Fatalf("card %+v", card)
		}
		if card.HeadSHA != "" && len(card.HeadSHA) != 40 && len(card.HeadSHA) != 64 {
			t.Fatalf("head sha %q", card.HeadSHA)
		}
		text := []string{card.Title, card.Body, card.Head, card.Base, card.Author}
		for _, c := range card.Checks {
			if !known(c.Outcome, forge.CheckPending, forge.CheckSuccess, forge.CheckFailure, forge.CheckNeutral) || !link(c.URL) || utf8.RuneCountInString(c.Detail) > 700 {
				t.Fatalf("check %+v", c)
			}
			text = append(text, c.Name, c.Detail)
		}
		for _, x := range text {
			if !utf8.ValidString(x) || strings.ContainsAny(x, "\x00\x1b\x07\r") {
				t.Fatalf("text %q", x)
			}
		}
	})
}
