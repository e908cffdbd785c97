package accounts_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/gittest"
	"sbx.dev/sbx/internal/errkind"
)

const tokFine = "github_pat_FFFFffff1111222233334444555566669999"

// TestIdentify: the token is checked against the real test forge's GET
// /api/v3/user; what it says (login, scopes, expiry) comes back, and what
// it refuses is an error of the right kind.
func TestIdentify(t *testing.T) {
	expires := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	srv := gittest.New(t, gittest.Options{Token: tokA, Tokens: map[string][]string{tokFine: {"acme/a"}}, Identities: map[string]gittest.Identity{
		tokA:    {Login: "octocat", Scopes: []string{"repo", "workflow"}, Expires: expires},
		tokB:    {Login: "noscope", Scopes: []string{}},
		tokFine: {Login: "finegrained"},
	}})
	svc, err := accounts.New(nil, nil, nil, accounts.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        accounts.Identity
		scopes      string
		kind        error
	}{
		{name: "classic with scopes and expiry", token: tokA, want: accounts.Identity{Login: "octocat", Scopes: []string{"repo", "workflow"}, HasScopes: true, Expires: expires}, scopes: "repo, workflow"},
		{name: "classic with no scopes", token: tokB, want: accounts.Identity{Login: "noscope", HasScopes: true}, scopes: "none (a classic token"},
		{name: "fine-grained", token: tokFine, want: accounts.Identity{Login: "finegrained"}, scopes: "fine-grained token"},
		{name: "unknown token", token: "ghp_ZZZZzzzz1111222233334444555566660000", kind: accounts.ErrTokenRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := svc.Identify(context.Background(), tc.token)
			if tc.kind != nil {
				if !errors.Is(err, tc.kind) || errkind.Of(err) != errkind.Invalid {
					t.Fatalf("Identify = %+v, %v; want %v", id, err, tc.kind)
				}
				if strings.Contains(err.Error(), tc.token) {
					t.Fatal("the error shows the token")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Login != tc.want.Login || id.HasScopes != tc.want.HasScopes || strings.Join(id.Scopes, ",") != strings.Join(tc.want.Scopes, ",") || !id.Expires.Equal(tc.want.Expires) {
				t.Fatalf("Identify = %+v, want %+v", id, tc.want)
			}
			if !strings.Contains(id.ScopesText(), tc.scopes) {
				t.Fatalf("ScopesText = %q, want %q in it", id.ScopesText(), tc.scopes)
			}
		})
	}
	// The request carried the token to the API path only.
	var asked bool
	for _, r := range srv.Requests() {
		asked = asked || r.Path == "/api/v3/user"
	}
	if !asked {
		t.Fatalf("no /api/v3/user request in %+v", srv.Requests())
	}
}

// TestIdentifyHostTrouble: a host that fails, cannot be reached or
// redirects elsewhere is Unavailable, and a redirect never carries the
// token to its target.
func TestIdentifyHostTrouble(t *testing.T) {
	var leaked bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = leaked || r.Header.Get("Authorization") != ""
		w.Write([]byte(`{"login":"evil"}`))
	}))
	defer target.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusFound)
	}))
	defer redir.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer broken.Close()
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Remaining", "0")
		http.Error(w, `{"message":"API rate limit exceeded"}`, http.StatusForbidden)
	}))
	defer limited.Close()
	notGitHub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>welcome</html>"))
	}))
	defer notGitHub.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	for _, tc := range []struct {
		name, host, msg string
		kind            *errkind.Kind
	}{
		{"5xx", broken.URL, "502", errkind.Unavailable},
		{"unreachable", closedURL, "connect", errkind.Unavailable},
		{"rate limited", limited.URL, "rate limited", errkind.Unavailable},
		{"redirect to another host", redir.URL, "not following with a token", errkind.Unavailable},
		{"not a GitHub", notGitHub.URL, "names no GitHub user", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := accounts.New(nil, nil, nil, accounts.Config{Host: tc.host})
			if err != nil {
				t.Fatal(err)
			}
			_, err = svc.Identify(context.Background(), tokA)
			if err == nil || errkind.Of(err) != tc.kind || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Identify: %v (kind %v); want %q of kind %v", err, errkind.Of(err), tc.msg, tc.kind)
			}
			if strings.Contains(err.Error(), tokA) {
				t.Fatal("the error shows the token")
			}
		})
	}
	if leaked {
		t.Fatal("the token followed the redirect to another host")
	}
}

// TestRegressionAccountAddWithoutProbe: `account add work` with no probe
// repository failed with `probe repository: repository "/": want
// owner/name`. Now the token is checked with the host's API and saved.
func TestRegressionAccountAddWithoutProbe(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, err := e.svc.Add(ctx, alice, "alice", "work", tokA, accounts.Repo{})
	if err != nil {
		t.Fatalf("Add without a probe: %v", err)
	}
	if a.Identity.Login != "gittest" || a.Masked != "ghp_…7777" || !a.Default {
		t.Fatalf("added %+v", a)
	}
	if list, _ := e.svc.List(ctx, alice, "alice"); len(list) != 1 || list[0].Name != "work" {
		t.Fatalf("list = %+v", list)
	}
	for _, r := range e.git.Requests() {
		if strings.Contains(r.Path, "info/refs") {
			t.Fatalf("probed a repository though none was named: %+v", r)
		}
	}
	if got := e.audit(t, "account.add"); len(got) != 1 || !strings.Contains(got[0].Detail, "login=gittest") || strings.Contains(got[0].Detail, "probe=") {
		t.Fatalf("audit = %+v", got)
	}
	// A token the host refuses is not saved.
	_, err = e.svc.Add(ctx, alice, "alice", "bad", "ghp_ZZZZzzzz1111222233334444555566660000", accounts.Repo{})
	if !errors.Is(err, accounts.ErrTokenRejected) {
		t.Fatalf("Add with a refused token: %v", err)
	}
	if list, _ := e.svc.List(ctx, alice, "alice"); len(list) != 1 {
		t.Fatalf("a refused token was saved: %+v", list)
	}
}

func TestAPIURL(t *testing.T) {
	for host, want := range map[string]string{
		"https://github.com":        "https://api.github.com",
		"https://ghe.example.com":   "https://ghe.example.com/api/v3",
		"http://127.0.0.1:8080/git": "http://127.0.0.1:8080/git/api/v3",
	} {
		u, err := accounts.ParseHost(host)
		if err != nil {
			t.Fatal(err)
		}
		if got := accounts.APIURL(u); got != want {
			t.Errorf("APIURL(%s) = %s, want %s", host, got, want)
		}
	}
}

// TestIdentifyByKind: a GitHub host is asked at /api/v3/user, a Gitea
// host at /api/v1/user (its user names may hold '_' and '.'); a Gitea
// answer does not pass for a GitHub one, and an unknown kind is refused.
func TestIdentifyByKind(t *testing.T) {
	var paths []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		w.Write([]byte(`{"login":"gitea_admin.1"}`))
	}))
	defer api.Close()
	for _, tc := range []struct {
		kind     forge.Kind
		path     string
		ok       bool
		errMatch string
	}{
		{forge.Gitea, "/api/v1/user", true, ""},
		{"", "/api/v3/user", false, "names no GitHub user"},
		{forge.GitHub, "/api/v3/user", false, "set git.kind"},
	} {
		paths = nil
		svc, err := accounts.New(nil, nil, nil, accounts.Config{Host: api.URL, Kind: tc.kind})
		if err != nil {
			t.Fatal(err)
		}
		id, err := svc.Identify(context.Background(), tokA)
		if len(paths) != 1 || paths[0] != tc.path {
			t.Errorf("%q asked %v, want %s", tc.kind, paths, tc.path)
		}
		if tc.ok && (err != nil || id.Login != "gitea_admin.1") {
			t.Errorf("%q: %+v %v", tc.kind, id, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.errMatch)) {
			t.Errorf("%q: %v, want %q", tc.kind, err, tc.errMatch)
		}
	}
	if _, err := accounts.New(nil, nil, nil, accounts.Config{Host: api.URL, Kind: "gitlab"}); !errors.Is(err, errkind.Invalid) {
		t.Errorf("kind gitlab: %v", err)
	}
}

// TestIdentifyExpiry: GitHub's expiry header comes with a zone name or a
// numeric offset; both read as the same instant, and the text says how
// long is left (or that it is over).
func TestIdentifyExpiry(t *testing.T) {
	want := time.Date(2027, 3, 4, 12, 0, 0, 0, time.UTC)
	for _, header := range []string{"2027-03-04 12:00:00 UTC", "2027-03-04 05:00:00 -0700"} {
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("GitHub-Authentication-Token-Expiration", header)
			w.Write([]byte(`{"login":"octocat"}`))
		}))
		svc, _ := accounts.New(nil, nil, nil, accounts.Config{Host: api.URL})
		id, err := svc.Identify(context.Background(), tokA)
		api.Close()
		if err != nil || !id.Expires.Equal(want) {
			t.Fatalf("%q: %+v %v", header, id, err)
		}
		if got := id.ExpiresText(want.Add(-50 * time.Hour)); got != "2027-03-04 12:00 UTC (in 2 days: expires soon)" {
			t.Errorf("ExpiresText = %q", got)
		}
		if got := id.ExpiresText(want.Add(time.Hour)); !strings.HasSuffix(got, "(expired)") {
			t.Errorf("ExpiresText after expiry = %q", got)
		}
	}
}

// TestExpiryMarks: a token is flagged from a week before its expiry, and
// expired from the instant itself; one without an expiry, or an account
// added before the identity was kept, is never flagged.
func TestExpiryMarks(t *testing.T) {
	exp := time.Date(2027, 3, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		id            accounts.Identity
		now           time.Time
		soon, expired bool
		text          string
	}{
		{"weeks left", accounts.Identity{Login: "o", Expires: exp}, exp.Add(-30 * 24 * time.Hour), false, false, "2027-03-04 12:00 UTC (in 30 days)"},
		{"just over a week", accounts.Identity{Login: "o", Expires: exp}, exp.Add(-accounts.ExpiresSoonWithin - time.Minute), false, false, "(in 7 days)"},
		{"just under a week", accounts.Identity{Login: "o", Expires: exp}, exp.Add(-accounts.ExpiresSoonWithin + time.Minute), true, false, "(in 6 days: expires soon)"},
		{"an hour left", accounts.Identity{Login: "o", Expires: exp}, exp.Add(-time.Hour), true, false, "(in less than a day: expires soon)"},
		{"the instant", accounts.Identity{Login: "o", Expires: exp}, exp, false, true, "(expired)"},
		{"long gone", accounts.Identity{Login: "o", Expires: exp}, exp.Add(365 * 24 * time.Hour), false, true, "(expired)"},
		{"never expires", accounts.Identity{Login: "o"}, exp, false, false, "never (or not reported)"},
		{"added before identities were kept", accounts.Identity{}, exp, false, false, "unknown (added before sbx checked tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.id.ExpiresSoon(tc.now); got != tc.soon {
				t.Errorf("ExpiresSoon = %v, want %v", got, tc.soon)
			}
			if got := tc.id.Expired(tc.now); got != tc.expired {
				t.Errorf("Expired = %v, want %v", got, tc.expired)
			}
			if got := tc.id.ExpiresText(tc.now); !strings.Contains(got, tc.text) {
				t.Errorf("ExpiresText = %q, want %q in it", got, tc.text)
			}
		})
	}
}
