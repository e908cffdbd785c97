package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

// newFront serves the HTTP front over a real SQLite store with one admin
// and one operator, each holding an API key.
func newFront(t testing.TB, o Options) (url, adminToken, opToken string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := keys.NewService(st, audit.New(st, logger, nil), nil)
	if _, err := svc.Bootstrap(ctx, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINF7mMSwJp8aTjkVomWE2mb9jbhmaty2vwerqOlOiMj3 admin", ""); err != nil {
		t.Fatal(err)
	}
	admin := keys.Actor{User: "admin", Role: keys.RoleAdmin, Front: "test"}
	if _, _, err := svc.AddUser(ctx, admin, "bob", keys.RoleOperator,
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJWxdFzOmDqeLuxzBVqeVw5zJ4w9gnmK5cbYZfkR2hTt bob"); err != nil {
		t.Fatal(err)
	}
	adminToken, _, err = svc.CreateAPIKey(ctx, admin, "admin", "t", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opToken, _, err = svc.CreateAPIKey(ctx, keys.Actor{User: "bob", Role: keys.RoleOperator, Front: "test"}, "bob", "t", []string{"write", "tokens"}, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	o.Identity, o.Logger = svc, logger
	// A route that panics: the recovery middleware answers 500.
	o.ExtraRoutes = map[string]http.Handler{"GET /api/v1/test/panic": http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("test hook: deliberate panic")
	})}
	if o.Throttle == nil {
		o.Throttle = throttle.NewAuth(20, 10*time.Minute, nil)
	}
	ts := httptest.NewServer(New(o))
	t.Cleanup(ts.Close)
	return ts.URL, adminToken, opToken
}

func do(t testing.TB, method, url, token, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, string(data)
}

var wantHeaders = map[string]string{
	"Content-Security-Policy":      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
	"X-Content-Type-Options":       "nosniff",
	"X-Frame-Options":              "DENY",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

func TestEveryResponseCarriesHeaders(t *testing.T) {
	url, admin, op := newFront(t, Options{MetricsAuth: true})
	big := `{"name":"` + strings.Repeat("a", 1<<20) + `"}`
	cases := []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"health", "GET", "/healthz", "", "", 200},
		{"whoami", "GET", "/api/v1/whoami", op, "", 200},
		{"no token", "GET", "/api/v1/whoami", "", "", 401},
		{"bad token", "GET", "/api/v1/whoami", "sbx_AAAAAAAA_nope", "", 401},
		{"metrics needs admin", "GET", "/metrics", op, "", 403},
		{"metrics admin", "GET", "/metrics", admin, "", 200},
		{"not found", "GET", "/nope", "", "", 404},
		{"wrong method", "PUT", "/healthz", "", "", 405},
		{"malformed", "POST", "/api/v1/tokens", op, "{", 400},
		{"unknown field", "POST", "/api/v1/tokens", op, `{"nam":"x"}`, 400},
		{"too large", "POST", "/api/v1/tokens", op, big, 413},
		{"created", "POST", "/api/v1/tokens", op, `{"name":"ci","expires":"1h"}`, 201},
		{"revoke unknown", "DELETE", "/api/v1/tokens/zzzzzzzz", op, "", 404},
		{"panic", "GET", "/api/v1/test/panic", "", "", 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.method, url+tc.path, tc.token, tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, body)
			}
			for k, v := range wantHeaders {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if !strings.Contains(resp.Header.Get("Permissions-Policy"), "camera=()") {
				t.Errorf("Permissions-Policy = %q", resp.Header.Get("Permissions-Policy"))
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			if resp.Header.Get("Strict-Transport-Security") != "" {
				t.Error("HSTS over plain HTTP")
			}
			if tc.want >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Errorf("error as %q: %s", resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

// TestRegressionTokenNotInURL: the API key is read from the Authorization
// header only; a token in the query string would land in logs and Referers.
func TestRegressionTokenNotInURL(t *testing.T) {
	url, _, op := newFront(t, Options{})
	for _, q := range []string{"?token=", "?access_token=", "?api_key="} {
		if resp, _ := do(t, "GET", url+"/api/v1/whoami"+q+op, "", ""); resp.StatusCode != 401 {
			t.Errorf("%s: status %d, want 401", q, resp.StatusCode)
		}
	}
}

func TestThrottleAndRate(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	url, _, op := newFront(t, Options{
		Throttle: throttle.NewAuth(3, time.Minute, clock),
		Rate:     throttle.NewRate(2, clock),
	})
	for range 3 {
		if resp, _ := do(t, "GET", url+"/api/v1/whoami", "sbx_AAAAAAAA_bad", ""); resp.StatusCode != 401 {
			t.Fatalf("status %d, want 401", resp.StatusCode)
		}
	}
	resp, _ := do(t, "GET", url+"/api/v1/whoami", op, "")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the failure limit: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	now = now.Add(2 * time.Minute)
	for i, want := range []int{200, 200, 429} {
		resp, body := do(t, "GET", url+"/api/v1/whoami", op, "")
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d: %s", i+1, resp.StatusCode, want, body)
		}
		if want == 429 && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
}

func TestBodyLimitOverride(t *testing.T) {
	s := New(Options{BodyLimit: 1024})
	h := WithBodyLimit(4096, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]string
		if s.decodeJSON(w, r, &v) == nil {
			w.WriteHeader(204)
		}
	}))
	for size, want := range map[int]int{2000: 204, 5000: 413} {
		body := `{"a":"` + strings.Repeat("x", size) + `"}`
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/", strings.NewReader(body)))
		if rec.Code != want {
			t.Errorf("%d bytes: %d, want %d", size, rec.Code, want)
		}
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add(`{"name":"x","expires":"1h"}`)
	f.Add(`{"name":`)
	f.Add(`[]`)
	f.Add(`{"name":"a"}{"name":"b"}`)
	s := New(Options{BodyLimit: 1024})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", strings.NewReader(body))
		var v createTokenRequest
		err := s.decodeJSON(rec, req, &v)
		switch {
		case err == nil && rec.Code != 200:
			t.Fatalf("decoded but answered %d", rec.Code)
		case err != nil && rec.Code != 400 && rec.Code != 413:
			t.Fatalf("error answered %d", rec.Code)
		case err != nil && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json"):
			t.Fatalf("error answered as %q", rec.Header().Get("Content-Type"))
		case len(body) > 1024 && err == nil:
			t.Fatalf("%d bytes accepted over a 1024 limit", len(body))
		}
	})
}

func FuzzBearer(f *testing.F) {
	f.Add("Bearer sbx_x_y")
	f.Add("bearer  tok ")
	f.Add("Basic abc")
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", h)
		tok, ok := bearer(r)
		if ok && (tok == "" || strings.ContainsAny(tok[:1], " \t")) {
			t.Fatalf("bearer(%q) = %q", h, tok)
		}
	})
}

// BenchmarkWhoami measures an authenticated request: headers, API-key lookup
// and hash check in SQLite, throttle, rate limit, JSON answer.
func BenchmarkWhoami(b *testing.B) {
	url, _, op := newFront(b, Options{})
	for b.Loop() {
		if resp, _ := do(b, "GET", url+"/api/v1/whoami", op, ""); resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// BenchmarkHealthz measures the middleware chain alone.
func BenchmarkHealthz(b *testing.B) {
	url, _, _ := newFront(b, Options{})
	for b.Loop() {
		if resp, _ := do(b, "GET", url+"/healthz", "", ""); resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// TestRegressionAPIKeyMintsStrongerKey: over HTTP, a key made with --scope
// read --expires 1h minted a key with no scope limit and no expiry (201) and
// revoked the user's other keys (204). Now token management through a key
// needs its tokens scope, a key-made key stays within its maker's scopes and
// life, and an unknown scope is refused.
func TestRegressionAPIKeyMintsStrongerKey(t *testing.T) {
	url, _, op := newFront(t, Options{})
	create := func(token, body string) (int, string) {
		t.Helper()
		resp, out := do(t, "POST", url+"/api/v1/tokens", token, body)
		return resp.StatusCode, out
	}
	st, body := create(op, `{"name":"ro","scopes":["read"],"expires":"1h"}`)
	if st != 201 {
		t.Fatalf("create read key: %d %s", st, body)
	}
	var ro struct {
		Token  string     `json:"token"`
		APIKey apiKeyJSON `json:"api_key"`
	}
	if err := json.Unmarshal([]byte(body), &ro); err != nil {
		t.Fatal(err)
	}
	// list names each key with whether it is revoked (last_used moves).
	list := func() string {
		_, out := do(t, "GET", url+"/api/v1/tokens", op, "")
		var ks []apiKeyJSON
		if err := json.Unmarshal([]byte(out), &ks); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var b strings.Builder
		for _, k := range ks {
			fmt.Fprintf(&b, "%s %v %v\n", k.ID, k.Scopes, k.Revoked != nil)
		}
		return b.String()
	}
	before := list()
	for _, tc := range []struct{ name, method, path, body string }{
		{"mint unrestricted", "POST", "/api/v1/tokens", `{"name":"x"}`},
		{"mint read", "POST", "/api/v1/tokens", `{"name":"x","scopes":["read"],"expires":"1m"}`},
		{"list", "GET", "/api/v1/tokens", ""},
		{"revoke the owner's key", "DELETE", "/api/v1/tokens/" + strings.Split(op, "_")[1], ""},
	} {
		resp, out := do(t, tc.method, url+tc.path, ro.Token, tc.body)
		if resp.StatusCode != 403 || !strings.Contains(out, `\"tokens\" scope`) {
			t.Errorf("%s with a read key: %d %s; want 403 naming the tokens scope", tc.name, resp.StatusCode, out)
		}
	}
	if after := list(); after != before {
		t.Errorf("refused calls changed the keys:\n%s\n%s", before, after)
	}

	// A tokens key: within its scopes and life only.
	st, body = create(op, `{"name":"mgr","scopes":["read","tokens"],"expires":"1h"}`)
	if st != 201 {
		t.Fatalf("create tokens key: %d %s", st, body)
	}
	var mgr struct {
		Token  string     `json:"token"`
		APIKey apiKeyJSON `json:"api_key"`
	}
	json.Unmarshal([]byte(body), &mgr)
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"scopes":["write"]}`, 403},
		{`{"scopes":["read"],"expires":"2h"}`, 403},
		{`{"scopes":["bad"]}`, 400},
		{`{"scopes":["read"],"expires":"30m"}`, 201},
	} {
		if st, out := create(mgr.Token, tc.body); st != tc.want {
			t.Errorf("%s with a read,tokens key: %d %s; want %d", tc.body, st, out, tc.want)
		}
	}
	st, body = create(mgr.Token, `{"name":"child"}`)
	var child struct {
		APIKey apiKeyJSON `json:"api_key"`
	}
	json.Unmarshal([]byte(body), &child)
	if st != 201 || strings.Join(child.APIKey.Scopes, ",") != "read" || child.APIKey.Expires == nil || !child.APIKey.Expires.Equal(*mgr.APIKey.Expires) {
		t.Errorf("unasked, a key-made key has its maker's rights and life: %d %s", st, body)
	}
	if resp, out := do(t, "DELETE", url+"/api/v1/tokens/"+strings.Split(op, "_")[1], mgr.Token, ""); resp.StatusCode != 403 {
		t.Errorf("a read,tokens key revoked a write key: %d %s", resp.StatusCode, out)
	}
	if resp, out := do(t, "DELETE", url+"/api/v1/tokens/"+ro.APIKey.ID, mgr.Token, ""); resp.StatusCode != 204 {
		t.Errorf("a read,tokens key revokes a read key within its life: %d %s", resp.StatusCode, out)
	}
	if st, out := create(op, `{"scopes":["bad"]}`); st != 400 || !strings.Contains(out, `scope \"bad\"`) {
		t.Errorf("unknown scope: %d %s; want 400 naming it", st, out)
	}
}
