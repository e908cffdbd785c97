package forge

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/internal/errkind"
)

func TestGiteaStatusKind(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   *errkind.Kind
	}{
		{301, errkind.Invalid}, {302, errkind.Invalid}, {307, errkind.Invalid},
		{400, errkind.Invalid}, {401, errkind.Invalid}, {403, errkind.Forbidden}, {404, errkind.NotFound},
		{405, errkind.Conflict}, {409, errkind.Conflict}, {410, errkind.NotFound}, {413, errkind.Invalid},
		{422, errkind.Invalid}, {429, errkind.Unavailable}, {500, errkind.Unavailable}, {502, errkind.Unavailable},
		{503, errkind.Unavailable}, {504, errkind.Unavailable},
	} {
		if got := giteaStatusKind(tc.status); got != tc.want {
			t.Errorf("giteaStatusKind(%d) = %v, want %v", tc.status, got, tc.want)
		}
		err := giteaStatusError("GET /x", tc.status, "", "the host's words")
		if errkind.Of(err) != tc.want {
			t.Errorf("giteaStatusError(%d) = %v, kind %v", tc.status, err, errkind.Of(err))
		}
	}
	if err := giteaStatusError("GET /x", 401, "", "whatever"); !strings.Contains(err.Error(), "token rejected") {
		t.Errorf("401: %v, want token rejected", err)
	}
	if err := giteaStatusError("GET /x", 422, "", "no changes\nbetween"); !strings.Contains(err.Error(), "no changes between") {
		t.Errorf("422: %v, want the host's message", err)
	}
}

func TestGiteaHostMessage(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"message":"head out of date","url":"x"}`, "head out of date"},
		{`{"message":"a\nb\u0007c"}`, "a bc"},
		{`not json`, "not json"},
		{`<html><body>502</body></html>`, ""},
		{``, ""},
		{`{"errors":[]}`, ""},
	} {
		if got := giteaHostMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("giteaHostMessage(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
	long := giteaHostMessage([]byte(strings.Repeat("é", 1000)))
	if !utf8.ValidString(long) || len(long) > giteaMaxMessage+len("…") {
		t.Errorf("a long message is cut to %d bytes, valid %v", len(long), utf8.ValidString(long))
	}
}

// TestGiteaRedirectNotFollowed: a redirect is answered, not followed, so
// the token never travels to another address.
func TestGiteaRedirectNotFollowed(t *testing.T) {
	var leaked bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = leaked || r.Header.Get("Authorization") != ""
		w.Write([]byte(`{"number":1}`))
	}))
	defer elsewhere.Close()
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusFound)
	}))
	defer host.Close()
	base, _ := url.Parse(host.URL)
	const tok = "redirect-secret-token"
	_, err := NewGitea(base, &http.Client{}).Get(context.Background(), tok, Repo{Owner: "a", Name: "b"}, 1)
	if errkind.Of(err) != errkind.Invalid || !strings.Contains(err.Error(), "not followed") || strings.Contains(err.Error(), tok) {
		t.Fatalf("redirect: %v", err)
	}
	if leaked {
		t.Fatal("the token was sent to the redirect's target")
	}
}

// TestGiteaMergeWaitsWhileChecking: Gitea refuses a merge with 405 "Please
// try again later" while it checks a pull request after a push (CI: an MCP
// pr_merge right after a push failed with it); Merge retries until the
// check is done and, when the refusal stands, says why in words. The
// answers are the ones Gitea v1.26 writes (routers/api/v1/repo/pull.go).
func TestGiteaMergeWaitsWhileChecking(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  int // merges refused before one lands (-1: never lands)
		want    *errkind.Kind
		message string
	}{
		{"lands at once", 0, nil, ""},
		{"checking twice", 2, nil, ""},
		{"never mergeable", -1, errkind.Conflict, "still reads the pull request as not mergeable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries int
			host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == "POST" && r.URL.Path == "/api/v1/repos/a/b/pulls/1/merge":
					tries++
					if tc.refuse < 0 || tries <= tc.refuse {
						w.WriteHeader(http.StatusMethodNotAllowed)
						w.Write([]byte(`{"message":"Please try again later","url":"https://gitea/api/swagger"}`))
					}
				case r.Method == "GET" && r.URL.Path == "/api/v1/repos/a/b/pulls/1":
					w.Write([]byte(`{"number":1,"state":"closed","merged":true,"head":{"sha":""}}`))
				default:
					w.Write([]byte(`[]`))
				}
			}))
			defer host.Close()
			base, _ := url.Parse(host.URL)
			g := NewGitea(base, nil).(*giteaForge)
			g.mergeWait = time.Second
			pr, err := g.Merge(context.Background(), "tok", Repo{Owner: "a", Name: "b"}, 1, Squash, "")
			if errkind.Of(err) != tc.want || (tc.message != "" && !strings.Contains(err.Error(), tc.message)) {
				t.Fatalf("after %d tries: %v (kind %v), want %v %q", tries, err, errkind.Of(err), tc.want, tc.message)
			}
			if tc.want == nil && (pr.State != StateMerged || tries != tc.refuse+1) {
				t.Fatalf("%+v after %d tries", pr, tries)
			}
			if tc.refuse < 0 && tries < 3 {
				t.Fatalf("gave up after %d tries", tries)
			}
		})
	}
}

func TestGiteaReviewState(t *testing.T) {
	u := func(s string) *giteaUser { return &giteaUser{Login: s} }
	for _, tc := range []struct {
		name    string
		reviews []giteaReview
		want    string
	}{
		{"none", nil, ReviewNone},
		{"comment only", []giteaReview{{ID: 1, State: "COMMENT", User: u("a")}}, ReviewNone},
		{"approved", []giteaReview{{ID: 1, State: "APPROVED", User: u("a")}}, ReviewApproved},
		{"changes then approved", []giteaReview{{ID: 2, State: "APPROVED", User: u("a")}, {ID: 1, State: "REQUEST_CHANGES", User: u("a")}}, ReviewApproved},
		{"approved then changes", []giteaReview{{ID: 1, State: "APPROVED", User: u("a")}, {ID: 2, State: "REQUEST_CHANGES", User: u("a")}}, ReviewChangesRequested},
		{"one of two wants changes", []giteaReview{{ID: 1, State: "APPROVED", User: u("a")}, {ID: 2, State: "REQUEST_CHANGES", User: u("b")}}, ReviewChangesRequested},
		{"dismissed", []giteaReview{{ID: 1, State: "REQUEST_CHANGES", User: u("a"), Dismissed: true}, {ID: 2, State: "APPROVED", User: u("b")}}, ReviewApproved},
		{"pending", []giteaReview{{ID: 1, State: "PENDING", User: u("a")}}, ReviewNone},
	} {
		if got := giteaReviewState(tc.reviews); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGiteaChecks(t *testing.T) {
	got := giteaChecks([]giteaStatus{
		{Context: "z", Status: "warning"}, {Context: "a", Status: "error", Description: "boom"},
		{Context: "b", Status: "pending"}, {Context: "c", Status: "success"}, {Context: "d", Status: "skipped"},
	})
	want := []Check{
		{Name: "a", Outcome: CheckFailure, Detail: "error: boom"}, {Name: "b", Outcome: CheckPending, Detail: "pending"},
		{Name: "c", Outcome: CheckSuccess, Detail: "success"}, {Name: "d", Outcome: CheckNeutral, Detail: "skipped"},
		{Name: "z", Outcome: CheckNeutral, Detail: "warning"},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("check %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// FuzzGiteaAnswer feeds arbitrary host answers to what parses them: an
// error body, a pull request, a repository. None panics, and what comes out
// keeps the contract's vocabulary.
func FuzzGiteaAnswer(f *testing.F) {
	f.Add([]byte(`{"message":"head out of date"}`))
	f.Add([]byte(`{"number":3,"state":"open","mergeable":true,"head":{"label":"sbx/b","sha":"abc","repo_id":1},"base":{"label":"main","repo_id":1},"merged_at":null}`))
	f.Add([]byte(`{"number":3,"state":"closed","merged":true,"merge_commit_sha":"abc","merged_at":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"name":"w","full_name":"o/w","owner":null,"updated_at":"bad"}`))
	f.Add([]byte("<html>\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg := giteaHostMessage(data)
		if strings.ContainsAny(msg, "\n\r\x00") || len(msg) > giteaMaxMessage+len("…") || !utf8.ValidString(msg) {
			t.Fatalf("message %q", msg)
		}
		var p giteaPull
		if json.Unmarshal(data, &p) == nil {
			pr := giteaPullRequest(Repo{Owner: "o", Name: "r"}, p)
			switch pr.State {
			case StateOpen, StateClosed, StateMerged:
			default:
				t.Fatalf("state %q", pr.State)
			}
			switch pr.Mergeable {
			case MergeableYes, MergeableConflict, MergeableUnknown:
			default:
				t.Fatalf("mergeable %q", pr.Mergeable)
			}
			if pr.State != StateOpen && pr.Mergeable != MergeableUnknown {
				t.Fatalf("a %s pull request is mergeable %q", pr.State, pr.Mergeable)
			}
		}
		var r giteaRepo
		if json.Unmarshal(data, &r) == nil {
			_ = giteaRepoInfo(r)
		}
		var statuses []giteaStatus
		if json.Unmarshal(data, &statuses) == nil {
			for _, c := range giteaChecks(statuses) {
				switch c.Outcome {
				case CheckPending, CheckSuccess, CheckFailure, CheckNeutral:
				default:
					t.Fatalf("outcome %q", c.Outcome)
				}
			}
		}
		err := giteaStatusError("GET /x", 400+int(len(data)%200), "", msg)
		if errkind.Of(err) == nil || errors.Unwrap(err) == nil {
			t.Fatalf("status error without a kind: %v", err)
		}
	})
}
