package mcp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

// front is the MCP handler over a real SQLite store and the real identity
// service, with users admin (admin), bob and carol (operators).
type front struct {
	url   string
	keys  *keys.Service
	audit *audit.Log
	clock *testutil.Clock
	admin keys.Actor
}

func newFront(t testing.TB, o Options) *front {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := testutil.NewClock(time.Now())
	al := audit.New(st, logger, clk.Now)
	svc := keys.NewService(st, al, clk.Now)
	if _, err := svc.Bootstrap(ctx, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINF7mMSwJp8aTjkVomWE2mb9jbhmaty2vwerqOlOiMj3 admin", ""); err != nil {
		t.Fatal(err)
	}
	admin := keys.Actor{User: "admin", Role: keys.RoleAdmin, Front: "test"}
	for name, key := range map[string]string{
		"bob":   "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJWxdFzOmDqeLuxzBVqeVw5zJ4w9gnmK5cbYZfkR2hTt bob",
		"carol": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHmvYUd4fPa4vnQPqOifD0Bv+aXt7fCu2yOhmDrrLYJh carol",
	} {
		if _, _, err := svc.AddUser(ctx, admin, name, keys.RoleOperator, key); err != nil {
			t.Fatal(err)
		}
	}
	o.Identity, o.Audit, o.Now = svc, al, clk.Now
	if o.Logger == nil {
		o.Logger = logger
	}
	if o.Throttle == nil {
		o.Throttle = throttle.NewAuth(20, 10*time.Minute, clk.Now)
	}
	return &front{url: serve(t, New(o)), keys: svc, audit: al, clock: clk, admin: admin}
}

// serve mounts h at /mcp on a loopback test server and returns its URL.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// token creates an API key for user with scopes.
func (f *front) token(t testing.TB, user string, scopes ...string) (string, keys.APIKey) {
	t.Helper()
	tok, k, err := f.keys.CreateAPIKey(context.Background(), f.admin, user, "test", scopes, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok, k
}

// bearerTransport adds the API key to every request, as an MCP client
// configured with a header does.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// Protocol versions the tests run under: the stateful one with sessions
// and the stateless one.
const (
	stateful  = "2025-11-25"
	stateless = "2026-07-28"
)

// connect opens an SDK client session with token, under protocol version.
func connect(t testing.TB, url, token, version string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "sbx-test", Version: "v0"}, opts)
	tr := &sdk.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token, base: http.DefaultTransport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { cs.Close() })
	return cs, nil
}

func mustConnect(t testing.TB, url, token, version string) *sdk.ClientSession {
	t.Helper()
	cs, err := connect(t, url, token, version, nil)
	if err != nil {
		t.Fatalf("connect (%s): %v", version, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated protocol %s, want %s", got, version)
	}
	return cs
}

func call(t testing.TB, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error (failures must be tool errors): %v", name, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// wantToolError checks res is a tool error whose text contains every want.
func wantToolError(t testing.TB, res *sdk.CallToolResult, want ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got success: %s", text(res))
	}
	for _, w := range want {
		if !strings.Contains(text(res), w) {
			t.Errorf("tool error %q does not contain %q", text(res), w)
		}
	}
}

// allTools is the list.
var allTools = []string{"delegate", "list", "status", "watch", "answer", "inbox", "diff", "list_artifacts",
	"read_artifact", "keep", "sleep", "wake", "teardown",
	"notify_list", "notify_add", "notify_remove", "notify_test", "notify_enable", "notify_log",
	"pr_open", "pr_get", "pr_merge", "pr_close", "repos", "title", "repo_add",
	"ask", "inbox_remove", "pool", "pool_set", "allow", "extend", "presets", "presets_default", "mirrors", "mirror_set",
	"profiles", "profile_set", "profile_delete", "profile_default",
	"checkpoint", "checkpoints", "rewind", "fork", "checkpoint_remove"}

var writeTools = []string{"delegate", "answer", "keep", "sleep", "wake", "teardown", "notify_add", "notify_remove", "notify_test", "notify_enable", "pr_open", "pr_merge", "pr_close", "title", "repo_add", "ask", "inbox_remove", "pool_set", "allow", "extend", "presets_default", "mirror_set", "profile_set", "profile_delete", "profile_default", "checkpoint", "rewind", "fork", "checkpoint_remove"}

func TestToolsListedInBothModes(t *testing.T) {
	f := newFront(t, Options{})
	tok, _ := f.token(t, "bob")
	for _, version := range []string{stateful, stateless} {
		t.Run(version, func(t *testing.T) {
			cs := mustConnect(t, f.url, tok, version)
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range res.Tools {
				names = append(names, tl.Name)
				if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
					t.Errorf("tool %s: description, input and output schema are required", tl.Name)
				}
				if tl.Annotations == nil || tl.Annotations.ReadOnlyHint == slices.Contains(writeTools, tl.Name) {
					t.Errorf("tool %s: readOnlyHint wrong: %+v", tl.Name, tl.Annotations)
				}
				// Merging and closing a pull request cannot be undone.
				if tl.Annotations != nil && slices.Contains([]string{"pr_merge", "pr_close", "teardown"}, tl.Name) && (tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint) {
					t.Errorf("tool %s: want destructiveHint", tl.Name)
				}
			}
			slices.Sort(names)
			want := slices.Clone(allTools)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Fatalf("tools = %v, want %v", names, want)
			}
			tmpl, err := cs.ListResourceTemplates(context.Background(), nil)
			if err != nil || len(tmpl.ResourceTemplates) != 1 || tmpl.ResourceTemplates[0].URITemplate != "sbx://{box}/{+path}" {
				t.Fatalf("resource templates = %+v, %v", tmpl, err)
			}
		})
	}
}

// rawPost sends one JSON-RPC message as an MCP client would, returning the
// status, headers and body.
func rawPost(t testing.TB, url, token, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
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
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

func errorOf(t testing.TB, body string) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body is not JSON: %q", body)
	}
	return e.Error
}

func TestAuthFailures(t *testing.T) {
	f := newFront(t, Options{})
	good, _ := f.token(t, "bob")
	revoked, rk := f.token(t, "bob")
	if err := f.keys.RevokeAPIKey(context.Background(), f.admin, "bob", rk.ID); err != nil {
		t.Fatal(err)
	}
	expiring, _, err := f.keys.CreateAPIKey(context.Background(), f.admin, "carol", "short", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := rawPost(t, f.url, expiring, initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("fresh key: %d", resp.StatusCode)
	}
	f.clock.Add(2 * time.Minute)

	for _, tc := range []struct {
		name, token, want string
		hdr               []string
	}{
		{"no header", "", "missing API key", nil},
		{"not a key", "sbx_nothing", "invalid", nil},
		{"wrong secret", good[:len(good)-4] + "AAAA", "invalid", nil},
		{"revoked", revoked, "invalid", nil},
		{"expired", expiring, "invalid", nil},
		{"basic scheme", "", "missing API key", []string{"Authorization", "Basic " + good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, f.url, tc.token, initBody, tc.hdr...)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(errorOf(t, body), tc.want) {
				t.Fatalf("got %d %s, want 401 with %q", resp.StatusCode, body, tc.want)
			}
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// The SDK's own client sees the refusal too.
	for _, v := range []string{stateful, stateless} {
		if _, err := connect(t, f.url, revoked, v, nil); err == nil {
			t.Errorf("%s: a revoked key connected", v)
		}
	}
	// The good key still works: failures above were per-request.
	mustConnect(t, f.url, good, stateful)
}

func TestRegressionKeyInQueryStringRefused(t *testing.T) {
	f := newFront(t, Options{})
	good, _ := f.token(t, "bob")
	for _, q := range []string{"?token=" + good, "?access_token=x", "?api_key=" + good, "?x=" + good, "?Authorization=Bearer%20" + good} {
		resp, body := rawPost(t, f.url+q, good, initBody)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errorOf(t, body), "never accepted in the URL") {
			t.Errorf("%s: got %d %s, want 400", q, resp.StatusCode, body)
		}
	}
	if resp, _ := rawPost(t, f.url+"?page=2", good, initBody); resp.StatusCode != http.StatusOK {
		t.Errorf("a harmless query string was refused: %d", resp.StatusCode)
	}
}

func TestThrottleSharedAndRetryAfter(t *testing.T) {
	thr := throttle.NewAuth(3, 10*time.Minute, nil)
	f := newFront(t, Options{Throttle: thr})
	good, _ := f.token(t, "bob")
	for range 3 {
		if resp, _ := rawPost(t, f.url, "sbx_bad", initBody); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("bad key: %d", resp.StatusCode)
		}
	}
	// Over the limit even a good key is refused before it is looked at.
	resp, body := rawPost(t, f.url, good, initBody)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d %s (Retry-After %q), want 429 with Retry-After", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// The throttle is the shared one: failures elsewhere count here.
	thr2 := throttle.NewAuth(3, 10*time.Minute, nil)
	f2 := newFront(t, Options{Throttle: thr2})
	for range 3 {
		thr2.Fail("127.0.0.1")
	}
	if resp, _ := rawPost(t, f2.url, "sbx_bad", initBody); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("failures on another front did not count: %d", resp.StatusCode)
	}
}

func TestDisabledUserRefused(t *testing.T) {
	f := newFront(t, Options{})
	tok, _ := f.token(t, "carol")
	if err := f.keys.SetDisabled(context.Background(), f.admin, "carol", true); err != nil {
		t.Fatal(err)
	}
	resp, body := rawPost(t, f.url, tok, initBody)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(errorOf(t, body), "disabled") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
}

func TestRegressionSessionBoundToItsUser(t *testing.T) {
	f := newFront(t, Options{})
	bob, _ := f.token(t, "bob")
	carol, _ := f.token(t, "carol")
	resp, _ := rawPost(t, f.url, bob, initBody)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, sid)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	resp, body := rawPost(t, f.url, carol, list, "Mcp-Session-Id", sid, "Mcp-Protocol-Version", stateful)
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("carol used bob's session: %d %s", resp.StatusCode, body)
	}
}

func TestKeyInQuery(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want bool
	}{
		{"", false},
		{"page=2", false},
		{"token=abc", true},
		{"TOKEN=abc", true},
		{"access_token=abc", true},
		{"x=sbx_abc", true},
		{"x=" + "sbx%5Fabc", true},
		{"sbx_abc", true},
		{"a=%zz", true},
		{"key=", true},
	} {
		req := httptest.NewRequest(http.MethodPost, "/mcp?"+tc.q, nil)
		if tc.q == "" {
			req = httptest.NewRequest(http.MethodPost, "/mcp", nil)
		}
		if got := keyInQuery(req.URL); got != tc.want {
			t.Errorf("keyInQuery(%q) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func FuzzKeyInQuery(f *testing.F) {
	f.Add("token=x")
	f.Add("a=sbx_1")
	f.Add("a=%73bx_1")
	f.Fuzz(func(t *testing.T, q string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		req.URL.RawQuery = q
		got := keyInQuery(req.URL)
		// Whatever the encoding, a decoded sbx_ anywhere must be caught.
		if dec, err := decodeAll(q); err == nil && strings.Contains(dec, keys.TokenPrefix) && !got {
			t.Fatalf("keyInQuery(%q) missed a key", q)
		}
	})
}

func decodeAll(q string) (string, error) {
	vals, err := url.ParseQuery(q)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for k, vs := range vals {
		b.WriteString(k + "=" + strings.Join(vs, ",") + "&")
	}
	return b.String(), nil
}

func TestPerUserRateLimit(t *testing.T) {
	f := newFront(t, Options{Rate: throttle.NewRate(3, nil)})
	bob, _ := f.token(t, "bob")
	carol, _ := f.token(t, "carol")
	for range 3 {
		if resp, _ := rawPost(t, f.url, bob, initBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("within the rate: %d", resp.StatusCode)
		}
	}
	resp, body := rawPost(t, f.url, bob, initBody)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("over the rate: %d %s", resp.StatusCode, body)
	}
	if resp, _ := rawPost(t, f.url, carol, initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("another user shares bob's rate: %d", resp.StatusCode)
	}
}
