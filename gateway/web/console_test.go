package web

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/store"
)

// console is the web front with its browser console over real SQLite,
// real keys and scs sessions, and a scripted core (newConsole) or the real
// one (newFleetConsole).
type console struct {
	t     testing.TB
	URL   string
	svc   *keys.Service
	core  *scriptedCore // nil over the real core
	fleet *fleet.Fleet  // nil over the scripted core
	audit *audit.Log
	store *store.SQLite
	logs  *testutil.SyncBuffer
	clock *testutil.Clock
	srv   *Server
	token string // alice's GitHub token on the test forge (real core only)
}

var cli = keys.Actor{User: "test", Role: keys.RoleAdmin, Front: keys.FrontCLI}

func newConsole(t testing.TB, o Options) *console {
	t.Helper()
	ctx := context.Background()
	c := &console{t: t, logs: &testutil.SyncBuffer{}, clock: testutil.NewClock(time.Now())}
	var err error
	c.store, err = store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })
	logger := slog.New(slog.NewTextHandler(c.logs, nil))
	c.audit = audit.New(c.store, logger, c.clock.Now)
	al := c.audit
	c.svc = keys.NewService(c.store, al, c.clock.Now)
	for _, u := range []struct {
		name string
		role keys.Role
		key  string
	}{
		{"admin", keys.RoleAdmin, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINF7mMSwJp8aTjkVomWE2mb9jbhmaty2vwerqOlOiMj3"},
		{"alice", keys.RoleOperator, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJWxdFzOmDqeLuxzBVqeVw5zJ4w9gnmK5cbYZfkR2hTt"},
	} {
		if _, _, err := c.svc.AddUser(ctx, cli, u.name, u.role, u.key); err != nil {
			t.Fatal(err)
		}
	}
	red, err := redact.New(ctx, nil, redact.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	c.core = newScriptedCore(red, t.TempDir())
	t.Cleanup(c.core.close)
	o.Identity, o.Logger, o.Audit = c.svc, logger, al
	o.Sessions = c.store.SessionStore(nil)
	if o.Throttle == nil {
		o.Throttle = throttle.NewAuth(20, 10*time.Minute, nil)
	}
	o.LoginHint = "ssh -p 2222 localhost login"
	c.srv = newServer(o, c.core)
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	return c
}

// link makes a one-time login link for user.
func (c *console) link(user string) string {
	c.t.Helper()
	token, _, err := c.svc.CreateLoginLink(context.Background(), cli, user)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.URL + "/login/" + token
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each 303.
func browser(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func send(t testing.TB, c *http.Client, method, u string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login logs a fresh client in as user through a link.
func (c *console) login(user string) *http.Client {
	c.t.Helper()
	b := browser(c.t)
	resp, body := send(c.t, b, "POST", c.link(user), url.Values{})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		c.t.Fatalf("login: %d %s: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	return b
}

func sessionCookie(resp *http.Response) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == SessionCookie {
			return ck
		}
	}
	return nil
}

func TestLoginLink(t *testing.T) {
	c := newConsole(t, Options{})
	b := browser(t)
	if resp, _ := send(t, b, "GET", c.URL+"/", nil); resp.StatusCode != 303 || resp.Header.Get("Location") != "/login" {
		t.Fatalf("no session: %d %q, want 303 /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := send(t, b, "GET", c.URL+"/login", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "ssh -p 2222 localhost login") {
		t.Fatalf("login page: %d %s", resp.StatusCode, body)
	}
	link := c.link("alice")
	// GET shows a button and spends nothing (link previews fetch URLs).
	resp, body = send(t, b, "GET", link, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `id="login"`) || sessionCookie(resp) != nil {
		t.Fatalf("GET link: %d cookie %v: %s", resp.StatusCode, sessionCookie(resp), body)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("link page Cache-Control %q", cc)
	}
	resp, _ = send(t, b, "POST", link, url.Values{})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/" {
		t.Fatalf("POST link: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := sessionCookie(resp)
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Secure || ck.Path != "/" {
		t.Fatalf("session cookie: %+v", ck)
	}
	if resp, body = send(t, b, "GET", c.URL+"/", nil); resp.StatusCode != 200 || !strings.Contains(body, `<span class="who">alice</span>`) {
		t.Fatalf("fleet after login: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != CSP+"; report-uri /csp-report" {
		t.Errorf("page CSP %q", got)
	}
	// Single use: the same link again, from another browser, fails.
	if resp, _ = send(t, browser(t), "POST", link, url.Values{}); resp.StatusCode != 401 {
		t.Fatalf("second use of a link: %d, want 401", resp.StatusCode)
	}
	// Expiry: a link older than five minutes fails.
	old := c.link("alice")
	c.clock.Add(keys.LoginTTL + time.Second)
	if resp, _ = send(t, browser(t), "POST", old, url.Values{}); resp.StatusCode != 401 {
		t.Fatalf("expired link: %d, want 401", resp.StatusCode)
	}
	for _, bad := range []string{"sbxl_short", "nope", strings.Repeat("a", 300)} {
		if resp, _ = send(t, browser(t), "GET", c.URL+"/login/"+bad, nil); resp.StatusCode != 404 {
			t.Errorf("GET /login/%.20s: %d, want 404", bad, resp.StatusCode)
		}
	}
}

// TestSecureCookieUnderTLS: the cookie is Secure with SecureCookies (a TLS
// proxy in front), and on any request that came over TLS.
func TestSecureCookieUnderTLS(t *testing.T) {
	c := newConsole(t, Options{SecureCookies: true})
	resp, _ := send(t, browser(t), "POST", c.link("alice"), url.Values{})
	if ck := sessionCookie(resp); ck == nil || !ck.Secure || !ck.HttpOnly {
		t.Fatalf("cookie %+v, want Secure and HttpOnly", ck)
	}

	tc := newConsole(t, Options{})
	ts := httptest.NewUnstartedServer(tc.srv)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	cl := browser(t)
	cl.Transport = ts.Client().Transport
	token := strings.TrimPrefix(tc.link("alice"), tc.URL)
	resp, _ = send(t, cl, "POST", ts.URL+token, url.Values{})
	ck := sessionCookie(resp)
	if resp.StatusCode != 303 || ck == nil || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode {
		t.Fatalf("over TLS: %d cookie %+v, want Secure", resp.StatusCode, ck)
	}
	if got := resp.Header.Get("Strict-Transport-Security"); got != HSTS {
		t.Errorf("HSTS over TLS: %q", got)
	}
	if resp, body := send(t, cl, "GET", ts.URL+"/", nil); resp.StatusCode != 200 || !strings.Contains(body, "alice") {
		t.Fatalf("fleet over TLS: %d", resp.StatusCode)
	}
}

// TestRegressionSessionFixation: a cookie planted before login is not the
// one the session runs under (RenewToken at login).
func TestRegressionSessionFixation(t *testing.T) {
	c := newConsole(t, Options{})
	b := browser(t)
	u, _ := url.Parse(c.URL)
	b.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: "planted-by-attacker", Path: "/"}})
	resp, _ := send(t, b, "POST", c.link("alice"), url.Values{})
	ck := sessionCookie(resp)
	if ck == nil || ck.Value == "planted-by-attacker" || ck.Value == "" {
		t.Fatalf("login kept the planted token: %+v", ck)
	}
	// And the planted token opens nothing.
	other := browser(t)
	other.Jar.SetCookies(u, []*http.Cookie{{Name: SessionCookie, Value: "planted-by-attacker", Path: "/"}})
	if resp, _ := send(t, other, "GET", c.URL+"/", nil); resp.StatusCode != 303 {
		t.Fatalf("planted token: %d, want 303 to login", resp.StatusCode)
	}
}

// TestRegressionTokenNotInStore: session and login tokens are stored
// hashed; a copy of the database opens no browser session.
func TestRegressionTokenNotInStore(t *testing.T) {
	c := newConsole(t, Options{})
	link := c.link("alice")
	b := browser(t)
	resp, _ := send(t, b, "POST", link, url.Values{})
	ck := sessionCookie(resp)
	ctx := context.Background()
	if _, found, err := c.store.SessionStore(nil).FindCtx(ctx, ck.Value); err != nil || !found {
		t.Fatalf("session not found by its token: %v %v", found, err)
	}
	var raw []byte
	for _, p := range []string{c.store.Path(), c.store.Path() + "-wal"} {
		b, _ := os.ReadFile(p)
		raw = append(raw, b...)
	}
	if len(raw) == 0 {
		t.Fatal("no database bytes read")
	}
	for _, secret := range []string{ck.Value, strings.TrimPrefix(link, c.URL+"/login/")} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the database holds a token in clear")
		}
	}
}

func TestCrossOriginPostRefused(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	b := c.login("alice")
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "https://evil.example"},
	} {
		resp, _ := send(t, b, "POST", c.URL+"/boxes/b1/destroy", url.Values{}, hdr...)
		if resp.StatusCode != 403 {
			t.Errorf("%s: %d, want 403", hdr, resp.StatusCode)
		}
	}
	if _, err := c.core.Get(context.Background(), keys.Actor{User: "alice"}, "b1"); err != nil {
		t.Fatalf("a cross-origin POST destroyed the box: %v", err)
	}
	// A cross-site login POST is refused too (login CSRF).
	if resp, _ := send(t, browser(t), "POST", c.link("alice"), url.Values{}, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != 403 {
		t.Errorf("cross-site login: %d, want 403", resp.StatusCode)
	}
	resp, _ := send(t, b, "POST", c.URL+"/boxes/b1/destroy", url.Values{}, "Sec-Fetch-Site", "same-origin", "Origin", c.URL)
	if resp.StatusCode != 303 {
		t.Fatalf("same-origin destroy: %d", resp.StatusCode)
	}
}

var sessionRow = regexp.MustCompile(`id="session-([0-9A-Za-z]+)"`)

func TestRevokeAndLogoutEndSessionsEverywhere(t *testing.T) {
	c := newConsole(t, Options{})
	a, b := c.login("alice"), c.login("alice")
	_, body := send(t, a, "GET", c.URL+"/settings", nil)
	ids := sessionRow.FindAllStringSubmatch(body, -1)
	if len(ids) != 2 {
		t.Fatalf("sessions listed: %d, want 2:\n%s", len(ids), body)
	}
	// Find b's id: the row not marked "this browser" for a.
	var other string
	for _, m := range ids {
		row, _, _ := strings.Cut(body[strings.Index(body, m[0]):], "</tr>")
		if !strings.Contains(row, "this browser") {
			other = m[1]
		}
	}
	if other == "" {
		t.Fatalf("no session row without the 'this browser' mark:\n%s", body)
	}
	if resp, _ := send(t, a, "POST", c.URL+"/settings/sessions/"+other+"/revoke", url.Values{}); resp.StatusCode != 303 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if resp, _ := send(t, b, "GET", c.URL+"/", nil); resp.StatusCode != 303 || resp.Header.Get("Location") != "/login" {
		t.Fatalf("revoked browser: %d %q, want 303 /login", resp.StatusCode, resp.Header.Get("Location"))
	}
	// htmx and event streams get 401 (htmx follows HX-Redirect).
	if resp, _ := send(t, b, "GET", c.URL+"/events", nil, "Accept", "text/event-stream"); resp.StatusCode != 401 {
		t.Errorf("revoked stream: %d, want 401", resp.StatusCode)
	}
	// Logout: the cookie a had is dead even if replayed.
	u, _ := url.Parse(c.URL)
	cookies := a.Jar.Cookies(u)
	if resp, _ := send(t, a, "POST", c.URL+"/logout", url.Values{}); resp.StatusCode != 303 || resp.Header.Get("Location") != "/login" {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	replay := browser(t)
	replay.Jar.SetCookies(u, cookies)
	if resp, _ := send(t, replay, "GET", c.URL+"/", nil); resp.StatusCode != 303 {
		t.Fatalf("replayed cookie after logout: %d, want 303", resp.StatusCode)
	}
	// Disabling the user ends their sessions too.
	d := c.login("alice")
	if err := c.svc.SetDisabled(context.Background(), cli, "alice", true); err != nil {
		t.Fatal(err)
	}
	if resp, _ := send(t, d, "GET", c.URL+"/", nil); resp.StatusCode != 303 {
		t.Fatalf("disabled user's session: %d, want 303", resp.StatusCode)
	}
}

func TestOwnershipThroughTheConsole(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("adm1", "admin", "admin's task", "", time.Now())
	b := c.login("alice")
	for _, p := range []string{"/boxes/adm1", "/boxes/adm1/diff", "/boxes/adm1/files", "/boxes/adm1/artifact?path=x", "/boxes/adm1/log.txt"} {
		if resp, _ := send(t, b, "GET", c.URL+p, nil); resp.StatusCode != 404 {
			t.Errorf("alice GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := send(t, b, "GET", c.URL+"/audit", nil); resp.StatusCode != 403 {
		t.Errorf("operator audit page: %d, want 403", resp.StatusCode)
	}
	adm := c.login("admin")
	if resp, body := send(t, adm, "GET", c.URL+"/audit?since=1h", nil); resp.StatusCode != 200 || !strings.Contains(body, "login.link") {
		t.Errorf("admin audit page: %d", resp.StatusCode)
	}
}

func TestArtifactIsADownloadOnly(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	c.core.setFile("b1", "out/page.html", []byte("<script>alert(1)</script>"))
	b := c.login("alice")
	resp, body := send(t, b, "GET", c.URL+"/boxes/b1/artifact?path=out/page.html", nil)
	if resp.StatusCode != 200 || body != "<script>alert(1)</script>" {
		t.Fatalf("artifact: %d %q", resp.StatusCode, body)
	}
	want := map[string]string{
		"Content-Security-Policy": ArtifactCSP,
		"Content-Type":            "application/octet-stream",
		"Content-Disposition":     `attachment; filename=page.html`,
		"X-Content-Type-Options":  "nosniff",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	// ../ cannot leave the box's tree as the console names it.
	if resp, _ := send(t, b, "GET", c.URL+"/boxes/b1/artifact?path=../../etc/passwd", nil); resp.StatusCode != 404 {
		t.Errorf("traversal: %d, want 404 (cleaned to etc/passwd, absent)", resp.StatusCode)
	}
}

func TestCSPReportsAreLoggedUnderABudget(t *testing.T) {
	c := newConsole(t, Options{})
	report := `{"csp-report":{"document-uri":"http://x/","violated-directive":"script-src-elem","blocked-uri":"inline"}}`
	for range cspReportsPerMinute + 10 {
		resp, _ := do(t, "POST", c.URL+"/csp-report", "", report, "Content-Type", "application/csp-report")
		if resp.StatusCode != 204 {
			t.Fatalf("report: %d", resp.StatusCode)
		}
	}
	if n := strings.Count(c.logs.String(), "csp violation"); n != cspReportsPerMinute {
		t.Errorf("%d report lines logged, want %d", n, cspReportsPerMinute)
	}
	if resp, _ := do(t, "POST", c.URL+"/csp-report", "", strings.Repeat("x", cspReportLimit+1)); resp.StatusCode != 413 {
		t.Errorf("oversized report: %d", resp.StatusCode)
	}
}

func TestConsoleOffWithoutSessionStore(t *testing.T) {
	url, _, _ := newFront(t, Options{})
	resp, body := do(t, "GET", url+"/", "", "")
	if resp.StatusCode != 503 || !strings.Contains(body, "no session store") {
		t.Fatalf("console without sessions: %d %s", resp.StatusCode, body)
	}
}

func TestMCPMountedBehindTheCommonMiddleware(t *testing.T) {
	var got int
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "too big", http.StatusRequestEntityTooLarge)
			return
		}
		got = len(b)
		w.WriteHeader(http.StatusAccepted)
	})
	c := newConsole(t, Options{MCP: mcp, BodyLimit: 1024})
	resp, _ := do(t, "POST", c.URL+"/mcp", "", `{"jsonrpc":"2.0"}`)
	if resp.StatusCode != 202 || got != 17 || resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("Content-Security-Policy") != CSP {
		t.Fatalf("/mcp: %d got %d headers %v", resp.StatusCode, got, resp.Header)
	}
	if resp, _ := do(t, "POST", c.URL+"/mcp", "", strings.Repeat("x", 2048)); resp.StatusCode != 413 {
		t.Fatalf("/mcp over the body limit: %d", resp.StatusCode)
	}
}

func TestStaticFiles(t *testing.T) {
	c := newConsole(t, Options{})
	for path, ctype := range map[string]string{"/static/htmx.min.js": "text/javascript", "/static/sse.min.js": "text/javascript",
		"/static/sbx.js": "text/javascript", "/static/sbx.css": "text/css", "/static/chroma.css": "text/css"} {
		resp, body := do(t, "GET", c.URL+path, "", "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(body) < 100 {
			t.Errorf("%s: %d %q %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
	// Every error is JSON, a missing static file's too (the file server's
	// own 404 was a text/plain page).
	for _, p := range []string{"/static/", "/static/nope.js", "/static/../static/nope.css", "/static/sub/"} {
		resp, body := do(t, "GET", c.URL+p, "", "")
		if resp.StatusCode != 404 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %q %s, want a JSON 404", p, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

func FuzzCleanRel(f *testing.F) {
	for _, s := range []string{"", ".", "..", "../../etc/passwd", "a/../../b", "/abs", "a//b/./c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := cleanRel(p)
		if strings.HasPrefix(got, "/") || got == ".." || strings.HasPrefix(got, "../") || strings.Contains(got, "/../") {
			t.Fatalf("cleanRel(%q) = %q", p, got)
		}
	})
}

func FuzzDownloadName(f *testing.F) {
	for _, s := range []string{"", "..", "a\r\nSet-Cookie: x", "ü.txt", "a/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) {
		got := downloadName(n)
		if got == "" || strings.ContainsAny(got, "\r\n/\\") || got == ".." {
			t.Fatalf("downloadName(%q) = %q", n, got)
		}
	})
}

// TestLogStreamResumesFromLastEventID: a reconnecting EventSource sends the
// last event id (the chunk's offset) and gets only what came after it.
func TestLogStreamResumesFromLastEventID(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	c.core.write("b1", "first line\nsecond <line>\n")
	b := c.login("alice")
	read := func(hdr ...string) (events []string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/boxes/b1/stream", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := b.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("stream: %d %q", resp.StatusCode, ct)
		}
		sc := bufio.NewScanner(resp.Body)
		var ev strings.Builder
		for sc.Scan() {
			if sc.Text() == "" {
				events = append(events, ev.String())
				ev.Reset()
				if strings.Contains(events[len(events)-1], "event: log") {
					return events
				}
				continue
			}
			ev.WriteString(sc.Text() + "\n")
		}
		return events
	}
	all := read()
	want := "id: 25\nevent: log\ndata: first line\ndata: second &lt;line&gt;\ndata: \n"
	// Every connection first refreshes the status and pull-request
	// panels, then the log.
	if len(all) != 3 || !strings.Contains(all[0], "event: status") || !strings.Contains(all[1], "event: prs") || all[2] != want {
		t.Fatalf("from the start: %q, want the status, then %q", all, want)
	}
	c.core.write("b1", "third\n")
	resumed := read("Last-Event-ID", "25")
	// A reconnect first refreshes the status panel, then the log goes on.
	if len(resumed) != 3 || !strings.Contains(resumed[0], "event: status") || resumed[2] != "id: 31\nevent: log\ndata: third\ndata: \n" {
		t.Fatalf("resumed: %q", resumed)
	}
	if resp, _ := send(t, b, "GET", c.URL+"/boxes/b1/stream", nil, "Last-Event-ID", "-1"); resp.StatusCode != 400 {
		t.Errorf("bad Last-Event-ID: %d", resp.StatusCode)
	}
}

// TestStreamStatusOnConnectRegression: a question asked between rendering a
// box's page and its stream connecting reaches the page — the stream starts
// with the box's status (it did so only on reconnects, and a turn that
// reached its question in that gap never showed the question panel).
func TestStreamStatusOnConnectRegression(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	b := c.login("alice")
	if resp, body := send(t, b, "GET", c.URL+"/boxes/b1", nil); resp.StatusCode != 200 || !strings.Contains(body, "state-running") {
		t.Fatalf("page: %d", resp.StatusCode)
	}
	c.core.ask("b1", "Which word?") // after the page, before the stream
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/boxes/b1/stream", nil)
	resp, err := b.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first strings.Builder
	for sc.Scan() && sc.Text() != "" {
		first.WriteString(sc.Text() + "\n")
	}
	if ev := first.String(); !strings.Contains(ev, "event: status") || !strings.Contains(ev, "state-waiting") || !strings.Contains(ev, "Which word?") {
		t.Fatalf("first event of the stream: %q, want the waiting status with the question", ev)
	}
}

// TestFleetStreamRefreshOnConnectRegression: the fleet stream starts with
// the rows as they are, so a box made between rendering the fleet page and
// the stream connecting shows without waiting for the next change.
func TestFleetStreamRefreshOnConnectRegression(t *testing.T) {
	c := newConsole(t, Options{})
	b := c.login("alice")
	c.core.add("late-box", "alice", "task", "", time.Now()) // before the stream subscribes
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/events", nil)
	resp, err := b.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("events: %v %v", err, resp)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var first strings.Builder
	for sc.Scan() {
		if sc.Text() == "" {
			if strings.Contains(first.String(), "event: fleet") {
				break
			}
			first.Reset() // a heartbeat comment
			continue
		}
		first.WriteString(sc.Text() + "\n")
	}
	if ev := first.String(); !strings.Contains(ev, "late-box") {
		t.Fatalf("first fleet event: %q, want the rows with late-box", ev)
	}
}

// TestCloseStreamsEndsEventStreams: shutdown does not wait on open streams.
func TestCloseStreamsEndsEventStreams(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	b := c.login("alice")
	done := make(chan error, 2)
	for _, p := range []string{"/events", "/boxes/b1/stream"} {
		resp, err := b.Get(c.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, err, resp)
		}
		go func() {
			_, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- err
		}()
	}
	c.srv.CloseStreams()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stream ended with %v, want a clean end", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a stream outlived CloseStreams")
		}
	}
}

// TestBoxStreamSaysWhenTheBoxIsGone: a box destroyed elsewhere replaces the
// status panel and ends the stream.
func TestBoxStreamSaysWhenTheBoxIsGone(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "task", "", time.Now())
	b := c.login("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.URL+"/boxes/b1/stream", nil)
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The first log event proves the stream subscribed to the box's events
	// (it does so before it writes anything).
	c.core.write("b1", "first\n")
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "data: first\n" {
			break
		}
	}
	if err := c.core.Destroy(ctx, keys.Actor{User: "alice"}, "b1"); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("stream did not end cleanly: %v", err)
	}
	if !strings.Contains(string(body), `id="gone"`) || !strings.Contains(string(body), "event: status") {
		t.Fatalf("stream: %q", body)
	}
}
