package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
)

// previewServerJS serves, from inside the box on 127.0.0.1:8000, a page
// whose script tries what box-made HTML on a preview would try against the
// console (argv[1]): read cookies, fetch the console's / with credentials
// (read the answer; then blindly), and a websocket echo of its own. It
// POSTs what it got to /report; the server prints every report and every
// Cookie header it is sent, one JSON line each, on stdout.
const previewServerJS = `
const consoleURL = process.argv[1];
const page = '<!doctype html><title>box page</title><h1 id="t">made in the box</h1><script>' +
  '(async () => {' +
  '  const r = {origin: location.origin};' +
  '  try { r.cookie = document.cookie; } catch (e) { r.cookie = "error " + e.name; }' +
  '  try { const res = await fetch(' + JSON.stringify(consoleURL + '/') + ', {credentials: "include"}); r.read = "status " + res.status + " " + (await res.text()).slice(0, 300); } catch (e) { r.read = "blocked " + e.name; }' +
  '  try { const res = await fetch(' + JSON.stringify(consoleURL + '/') + ', {credentials: "include", mode: "no-cors"}); r.blind = "type " + res.type; } catch (e) { r.blind = "blocked " + e.name; }' +
  '  try { r.ws = await new Promise((ok, no) => { const w = new WebSocket("ws://" + location.host + "/ws"); w.onopen = () => w.send("ping"); w.onmessage = m => { ok(m.data); w.close(); }; w.onerror = () => no(new Error("ws error")); }); } catch (e) { r.ws = "failed " + e.message; }' +
  '  await fetch("/report", {method: "POST", body: JSON.stringify(r)});' +
  '  document.getElementById("t").dataset.done = "1";' +
  '})();' +
  '</script>';
const server = require('http').createServer((q, s) => {
  if (q.headers.cookie) console.log(JSON.stringify({cookie: q.headers.cookie}));
  if (q.method === 'POST' && q.url === '/report') {
    let b = ''; q.on('data', d => b += d); q.on('end', () => { console.log(JSON.stringify({report: JSON.parse(b)})); s.end('ok'); });
    return;
  }
  s.setHeader('Set-Cookie', 'session=planted-by-the-box; Path=/');
  s.setHeader('Content-Type', 'text/html');
  s.end(page);
});
// A websocket echo by hand (RFC 6455, short unmasked text frames out).
server.on('upgrade', (q, sock) => {
  const key = require('crypto').createHash('sha1').update(q.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + key + '\r\n\r\n');
  sock.on('data', d => {
    if ((d[0] & 0x0f) !== 1) { sock.end(); return; }
    const n = d[1] & 0x7f, mask = d.slice(2, 6), p = Buffer.from(d.slice(6, 6 + n).map((c, i) => c ^ mask[i % 4]));
    const out = Buffer.from('pong:' + p.toString());
    sock.write(Buffer.concat([Buffer.from([0x81, out.length]), out]));
  });
});
server.listen(8000, '127.0.0.1', () => console.log(JSON.stringify({listening: true})));
`

// TestBrowserPreview: the box page's "Preview port" opens, on the preview
// origin, a page a process in the box serves; that page gets neither the
// console's session (no cookie it can read, the console's / unreadable and
// unreachable) nor does the box ever receive a cookie; the box cannot plant
// a cookie; the preview origin refuses the console's session, forged,
// spent, expired and swapped tokens; and each preview connection is an
// audit row.
func TestBrowserPreview(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU box")
	}
	ctx := context.Background()
	var skew atomic.Int64
	h := fleettest.New(t, fleettest.Options{MaxBoxes: 2, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	alice, bob := h.Actors["alice"], h.Actors["bob"]

	pv := httptest.NewServer(Preview(PreviewOptions{Fleet: h.Fleet, Logger: h.Logger}))
	t.Cleanup(pv.Close)
	ts := httptest.NewServer(New(Options{Identity: h.Keys, Logger: h.Logger, Audit: h.Audit, Fleet: h.Fleet,
		Sessions: h.Store.SessionStore(nil), Throttle: throttle.NewAuth(20, 10*time.Minute, nil),
		PreviewURL: func() string { return pv.URL }}))
	t.Cleanup(ts.Close)

	b, err := h.Fleet.Delegate(ctx, alice, fleet.DelegateRequest{Task: "!say ready", Agent: "script"})
	if err != nil {
		t.Fatal(err)
	}
	h.WaitState(alice, b.Name, fleet.Done)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	p, err := h.Fleet.Exec(sctx, alice, b.Name, fleet.ExecRequest{Argv: []string{"node", "-e", previewServerJS, ts.URL}, User: fleet.AgentUser})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stdin().Close()
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(p.Stdout())
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	var mu sync.Mutex
	var cookiesSeen []string
	next := func(what string) map[string]any {
		t.Helper()
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("the box's server ended before %s", what)
				}
				if c, ok := m["cookie"]; ok {
					mu.Lock()
					cookiesSeen = append(cookiesSeen, c.(string))
					mu.Unlock()
					continue
				}
				return m
			case <-time.After(2 * time.Minute):
				t.Fatalf("no %s from the box", what)
			}
		}
	}
	if m := next("listening"); m["listening"] != true {
		t.Fatalf("box server: %v", m)
	}

	link, _, err := h.Keys.CreateLoginLink(ctx, cli, "alice")
	if err != nil {
		t.Fatal(err)
	}
	br := chromium(t)
	br.do("log in", chromedp.Navigate(ts.URL+"/login/"+link), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.do("box page", chromedp.Navigate(ts.URL+"/boxes/"+b.Name), chromedp.WaitVisible(chromedp.CSS("#preview-form")))
	br.clean("box page with the preview form")
	br.do("preview", chromedp.SetValue(chromedp.CSS("#preview-port"), "8000"), chromedp.Click(chromedp.CSS("#preview")))
	br.waitForLong("the box's page on the preview origin",
		`location.origin === `+jsString(pv.URL)+` && document.querySelector('#t') && document.querySelector('#t').dataset.done === '1'`, 2*time.Minute)
	if loc := br.location(); loc != pv.URL+"/" {
		t.Fatalf("preview at %s, want %s/ (the link's token gone from the address)", loc, pv.URL)
	}
	rep, _ := next("report")["report"].(map[string]any)
	t.Logf("the box page's report: %v", rep)
	if rep["origin"] != pv.URL {
		t.Errorf("the box page ran on %v, want the preview origin %s", rep["origin"], pv.URL)
	}
	if c, _ := rep["cookie"].(string); c != "" {
		t.Errorf("the box page read cookies: %q", c)
	}
	if r, _ := rep["read"].(string); !strings.HasPrefix(r, "blocked") {
		t.Errorf("the box page read the console: %q", r)
	}
	if r, _ := rep["blind"].(string); !strings.HasPrefix(r, "blocked") {
		t.Errorf("the box page reached the console blindly: %q", r)
	}
	if r, _ := rep["ws"].(string); r != "pong:ping" {
		t.Errorf("websocket through the preview: %q, want pong:ping", r)
	}

	// The browser's cookies: the console's session is there (host-wide),
	// the box's planted one is not.
	got, err := chromedp.Call(br.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{ts.URL, pv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	cookies := got.Cookies
	var consoleSession, previewSession string
	for _, c := range cookies {
		switch {
		case c.Value == "planted-by-the-box":
			t.Errorf("the box planted a cookie on the console's host: %+v", c)
		case c.Name == PreviewCookie:
			previewSession = c.Value
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("preview cookie %+v: want HttpOnly, SameSite=Strict", c)
			}
		default:
			consoleSession = c.Name + "=" + c.Value
		}
	}
	if consoleSession == "" || previewSession == "" {
		t.Fatalf("cookies: %+v", cookies)
	}
	// The browser sent the console's cookie to the preview origin (same
	// host): the box never got it, nor any cookie.
	mu.Lock()
	if len(cookiesSeen) > 0 {
		t.Errorf("the box was sent cookies: %q", cookiesSeen)
	}
	mu.Unlock()

	get := func(u string, cookie string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// The preview origin does not take the console's session.
	if code, body := get(pv.URL+"/", consoleSession); code != http.StatusForbidden || strings.Contains(body, "made in the box") {
		t.Errorf("the console's session on the preview origin: %d %q", code, body)
	}
	// The preview session works alone, and never on the console.
	if code, body := get(pv.URL+"/", PreviewCookie+"="+previewSession); code != http.StatusOK || !strings.Contains(body, "made in the box") {
		t.Errorf("the preview session: %d %q", code, body)
	}
	if code, _ := get(ts.URL+"/", PreviewCookie+"="+previewSession); code == http.StatusOK {
		t.Errorf("the preview session opened the console")
	}
	// Links: once, within 5 minutes; no token of another kind or forged.
	tk, err := h.Fleet.PreviewLink(ctx, alice, b.Name, 8000)
	if err != nil {
		t.Fatal(err)
	}
	open := pv.URL + previewOpenPath + "?t=" + url.QueryEscape(tk.Token)
	if code, _ := get(open, ""); code != http.StatusOK {
		t.Errorf("a fresh link: %d", code)
	}
	if code, body := get(open, ""); code != http.StatusForbidden || !strings.Contains(body, "already opened") {
		t.Errorf("a link opened twice: %d %q", code, body)
	}
	for what, u := range map[string]string{
		"a session as a link": pv.URL + previewOpenPath + "?t=" + url.QueryEscape(previewSession),
		"a forged link":       pv.URL + previewOpenPath + "?t=" + url.QueryEscape(tk.Token[:len(tk.Token)-2]+"AA"),
		"no link":             pv.URL + previewOpenPath,
	} {
		if code, _ := get(u, ""); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", what, code)
		}
	}
	if code, _ := get(pv.URL+"/", PreviewCookie+"="+tk.Token); code != http.StatusForbidden {
		t.Errorf("a link as the session cookie: %d", code)
	}
	late, err := h.Fleet.PreviewLink(ctx, alice, b.Name, 8000)
	if err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(fleet.PreviewLinkTTL + time.Second))
	if code, _ := get(pv.URL+previewOpenPath+"?t="+url.QueryEscape(late.Token), ""); code != http.StatusForbidden {
		t.Errorf("an expired link: %d", code)
	}
	skew.Store(int64(fleet.PreviewSessionTTL + time.Second))
	if code, _ := get(pv.URL+"/", PreviewCookie+"="+previewSession); code != http.StatusForbidden {
		t.Errorf("an expired session: %d", code)
	}
	skew.Store(0)
	// Owner or admin: bob gets "not found", root a link.
	if _, err := h.Fleet.PreviewLink(ctx, bob, b.Name, 8000); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("bob's preview of alice's box: %v", err)
	}
	if _, err := h.Fleet.PreviewLink(ctx, h.Actors["root"], b.Name, 8000); err != nil {
		t.Errorf("root's preview: %v", err)
	}
	// Audit: the link and the connections, as alice, from the preview front.
	rows, err := h.Audit.List(ctx, audit.Filter{User: "alice", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var links, conns int
	for _, r := range rows {
		if r.Action == "box.preview" && r.Result == audit.ResultOK && r.Detail == "port 8000" {
			links++
		}
		if r.Action == "box.forward" && r.Front == "preview" && r.Result == audit.ResultOK && r.Detail == "port 8000" {
			conns++
		}
	}
	if links < 2 || conns < 1 {
		t.Errorf("audit: %d box.preview and %d box.forward rows by the preview front", links, conns)
	}
}
