package web

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// Browser tests drive Debian's chromium headless over the DevTools protocol
// (chromedp). Every page is checked for CSP violations three ways: the
// page's securitypolicyviolation events (recorded by a script the browser
// injects, outside the page's CSP), the DevTools Log domain, and the
// gateway's /csp-report log.

// chromeFlags are the launch flags of the issue.
var chromeFlags = []chromedp.ExecAllocatorOption{
	chromedp.Headless,
	chromedp.NoSandbox,
	chromedp.DisableGPU,
	chromedp.NoFirstRun,
	chromedp.Flag("disable-background-networking", true),
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-sync", true),
	chromedp.Flag("disable-dev-shm-usage", true),
	chromedp.WindowSize(1280, 900),
}

// watch is injected into every document before the page's own scripts.
const watch = `window.__csp = [];
document.addEventListener('securitypolicyviolation', e =>
  window.__csp.push(e.violatedDirective + ' blocked=' + e.blockedURI + ' sample=' + e.sample));
window.__xss = 0;`

// inert lists what an injected payload would leave in the DOM: event
// handler attributes, javascript: URLs, scripts other than ours, and
// elements no page of ours has.
const inert = `(() => {
  const bad = [];
  for (const el of document.querySelectorAll('*')) {
    for (const a of el.attributes) {
      if (a.name.startsWith('on')) bad.push(el.tagName + ' ' + a.name);
      if (['href', 'src', 'action', 'formaction', 'data'].includes(a.name) && /^\s*(javascript|data):/i.test(a.value)) bad.push(el.tagName + ' ' + a.name + '=' + a.value);
    }
    if (el.tagName === 'SCRIPT' && !/^\/static\/((htmx|sse)\.min|sbx)\.js$/.test(el.getAttribute('src') || '')) bad.push('SCRIPT ' + el.outerHTML.slice(0, 80));
    if (['IFRAME', 'OBJECT', 'EMBED', 'IMG', 'svg', 'SVG', 'STYLE', 'BASE', 'MATH', 'math', 'VIDEO', 'AUDIO', 'LINK'].includes(el.tagName) &&
        !(el.tagName === 'LINK' && /^\/static\/(sbx|chroma)\.css$/.test(el.getAttribute('href') || ''))) bad.push(el.tagName);
    if (el.tagName === 'META' && el.hasAttribute('http-equiv')) bad.push('META http-equiv');
  }
  if (window.__xss !== 0) bad.push('payload ran: __xss=' + window.__xss);
  return bad;
})()`

type chrome struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	logged   []string // DevTools Log entries about security/CSP
	download string
}

func chromium(t *testing.T) *chrome {
	t.Helper()
	testutil.SkipShort(t, "drives Chromium")
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is missing: apt-get install chromium chromium-driver (go tool -modfile=tools/go.mod task deps-test installs them)")
	}
	opts := append([]chromedp.ExecAllocatorOption{chromedp.ExecPath(path)}, chromeFlags...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	c := &chrome{t: t, ctx: ctx, download: t.TempDir()}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdplog.EventEntryAdded); ok && e.Entry != nil {
			if e.Entry.Source == "security" || e.Entry.Source == "violation" || strings.Contains(e.Entry.Text, "Content Security Policy") {
				c.mu.Lock()
				c.logged = append(c.logged, string(e.Entry.Source)+": "+e.Entry.Text)
				c.mu.Unlock()
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: watch}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: c.download, EventsEnabled: &yes}); err != nil {
		t.Fatal(err)
	}
	return c
}

// do runs steps with a bound on the whole.
func (c *chrome) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

func (c *chrome) eval(js string, out any) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	var err error
	switch p := out.(type) {
	case *[]string:
		*p, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
	case *string:
		*p, err = chromedp.Run(ctx, chromedp.Evaluate[string](js))
	case *bool:
		*p, err = chromedp.Run(ctx, chromedp.Evaluate[bool](js))
	default:
		c.t.Fatalf("eval into %T", out)
	}
	if err != nil {
		c.t.Fatalf("eval %.60s: %v", js, err)
	}
}

func (c *chrome) location() string {
	c.t.Helper()
	loc, err := chromedp.Run(c.ctx, chromedp.Location())
	if err != nil {
		c.t.Fatal(err)
	}
	return loc
}

// waitFor polls a JavaScript condition (htmx swaps arrive asynchronously).
func (c *chrome) waitFor(what, js string) { c.waitForLong(what, js, 20*time.Second) }

// waitForLong is waitFor with its own bound (a box boots, an agent runs, a
// form's POST is answered). An evaluation that fails while a navigation is
// under way counts as "not yet".
func (c *chrome) waitForLong(what, js string, d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	var body string
	c.eval("document.body ? document.body.innerText : ''", &body)
	c.t.Fatalf("timed out waiting for %s at %s (last error %v); page:\n%s", what, c.location(), last, body)
}

// clean asserts the current page raised no CSP violation and holds nothing
// an injected payload would leave.
func (c *chrome) clean(page string) {
	c.t.Helper()
	var csp, bad []string
	c.eval("window.__csp", &csp)
	c.eval(inert, &bad)
	c.mu.Lock()
	logged := slices.Clone(c.logged)
	c.logged = nil
	c.mu.Unlock()
	if len(csp) > 0 || len(logged) > 0 {
		c.t.Errorf("%s: CSP violations: %q, DevTools log: %q", page, csp, logged)
	}
	if len(bad) > 0 {
		c.t.Errorf("%s: payload left active markup: %q", page, bad)
	}
}

func (c *chrome) screenshot(name string) {
	c.t.Helper()
	buf, err := chromedp.Run(c.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		c.t.Fatal(err)
	}
	dir := c.t.ArtifactDir()
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("screenshot %s", filepath.Join(dir, name))
}

// xssCorpus: each must render as the literal text it is.
var xssCorpus = []string{
	`<script>window.__xss=1</script>`,
	`"><img src=x onerror="window.__xss=2">`,
	`'><svg onload=window.__xss=3>`,
	`javascript:window.__xss=4`,
	`</pre><iframe src="javascript:window.__xss=5"></iframe>`,
	`<style>body{display:none}</style>{{.}}${7*7}`,
	`" onmouseover="window.__xss=6" x="`,
	`<a href="javascript:window.__xss=7">click</a>`,
	`<base href="//evil.example/">`,
	`<math><mi xlink:href="javascript:window.__xss=8">m</mi></math>`,
}

func TestBrowserConsole(t *testing.T) {
	c := newConsole(t, Options{})
	payload := strings.Join(xssCorpus, " ")
	c.core.add("b1", "alice", "fix it "+payload, xssCorpus[1], time.Now().Add(-time.Hour))
	c.core.setFile("b1", "report.txt", []byte("the report\n"))
	for i, p := range xssCorpus {
		c.core.setFile("b1", fmt.Sprintf("x%d-%s", i, p), []byte("payload file\n"))
	}
	c.core.setDiff("b1", "diff --git a/"+xssCorpus[0]+" b/"+xssCorpus[0]+"\n--- a/"+xssCorpus[0]+"\n+++ b/"+xssCorpus[0]+"\n@@ -1 +1 @@\n-old\n+"+payload+"\n")
	br := chromium(t)

	// Log in through a one-time link.
	br.do("open login link", chromedp.Navigate(c.link("alice")))
	br.clean("login link")
	br.do("log in", chromedp.Click(chromedp.CSS("#login")), chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	if loc := br.location(); loc != c.URL+"/" {
		t.Fatalf("after login at %s", loc)
	}
	br.waitFor("the fleet row", `document.querySelector('#box-b1')`)
	var text string
	br.eval(`document.querySelector('#box-b1 .task').innerText`, &text)
	if !strings.Contains(text, xssCorpus[0]) {
		t.Errorf("task not shown as text: %q", text)
	}
	br.clean("fleet")
	br.screenshot("fleet.png")

	// The fleet page updates live: a new box appears without a reload.
	c.core.add("b2", "alice", "second "+xssCorpus[2], "", time.Now())
	br.waitFor("a new box over SSE", `document.querySelector('#box-b2')`)
	br.clean("fleet after SSE")

	// The box page: the log updates live, escaped.
	br.do("open box", chromedp.Navigate(c.URL+"/boxes/b1"), chromedp.WaitVisible(chromedp.CSS("#log")))
	br.waitFor("the diff", `document.querySelector('#diff table.changed')`)
	br.waitFor("the files", `document.querySelector('#files a[href$="report.txt"]')`)
	c.core.write("b1", "hello from the agent\n")
	br.waitFor("live log line", `document.querySelector('#log').innerText.includes('hello from the agent')`)
	for _, p := range xssCorpus {
		c.core.write("b1", p+"\n")
	}
	c.core.write("b1", "end of corpus\n")
	br.waitFor("corpus in the log", `document.querySelector('#log').innerText.includes('end of corpus')`)
	br.eval(`document.querySelector('#log').innerText`, &text)
	for _, p := range xssCorpus {
		if !strings.Contains(text, p) {
			t.Errorf("log lacks the literal %q", p)
		}
	}
	// A question arrives over SSE with the answer form.
	c.core.ask("b1", "Which word? "+xssCorpus[4])
	br.waitFor("the question", `document.querySelector('#question') && document.querySelector('input[name=mode][value=answer]')`)
	br.eval(`document.querySelector('#question').innerText`, &text)
	if !strings.Contains(text, xssCorpus[4]) {
		t.Errorf("question not shown as text: %q", text)
	}
	br.clean("box")
	br.screenshot("box.png")

	// Answer it.
	br.do("answer", chromedp.SendKeys(chromedp.CSS("#answer-text"), "banana"), chromedp.Click(chromedp.CSS("#answer-send")))
	br.waitFor("the answer's flash", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('Answer sent')`)
	if got := c.core.answered(); !slices.Equal(got, []string{"banana"}) {
		t.Errorf("the core got answers %q", got)
	}
	br.clean("box after answer")

	// Download an artifact: the bytes land on disk, nothing renders.
	br.waitFor("the files", `document.querySelector('#files a[href$="report.txt"]')`)
	br.do("download", chromedp.Click(chromedp.CSS(`#files a[href$="report.txt"]`)))
	got := waitFile(t, filepath.Join(br.download, "report.txt"))
	if got != "the report\n" {
		t.Errorf("downloaded %q", got)
	}
	if loc := br.location(); loc != c.URL+"/boxes/b1" {
		t.Errorf("the download navigated to %s", loc)
	}

	// Every other page: no violation, nothing active.
	for _, p := range []string{"/boxes/b1/diff", "/boxes/b1/files", "/delegate", "/settings", "/boxes/nope", "/boxes/b1/files?path=x1-" + xssCorpus[1]} {
		br.do("open "+p, chromedp.Navigate(c.URL+p), chromedp.WaitVisible(chromedp.CSS("main")))
		br.clean(p)
	}
	// Create a read-only API key: shown once, with the scope chosen.
	br.do("settings", chromedp.Navigate(c.URL+"/settings"), chromedp.SendKeys(chromedp.CSS("#key-name"), "browser"),
		chromedp.Click(chromedp.CSS(`input[name=scope][value=read]`)),
		chromedp.Click(chromedp.CSS("#key-create")), chromedp.WaitVisible(chromedp.CSS("#new-token")))
	br.eval(`document.querySelector('#new-token').innerText`, &text)
	if _, err := keys.ParseToken(strings.TrimSpace(text)); err != nil {
		t.Errorf("new API key %q: %v", text, err)
	}
	if _, k, err := c.svc.UserByAPIKey(context.Background(), strings.TrimSpace(text)); err != nil || strings.Join(k.Scopes, ",") != "read" {
		t.Errorf("the key made with the read scope has %v (%v)", k.Scopes, err)
	}
	br.clean("settings after key")
	// Delegate through the form (a plain POST and redirect).
	br.do("delegate", chromedp.Navigate(c.URL+"/delegate"), chromedp.SendKeys(chromedp.CSS("#task"), "new task "+xssCorpus[0]),
		chromedp.Click(chromedp.CSS("#delegate")))
	br.waitFor("the new box page", `location.pathname.startsWith('/boxes/box-')`)
	br.clean("delegated box")

	// Revoke the browser's session elsewhere: the next request bounces.
	ctx := context.Background()
	list, err := c.svc.WebSessions(ctx, cli, "alice")
	if err != nil || len(list) != 1 {
		t.Fatalf("sessions: %v %v", list, err)
	}
	if err := c.svc.RevokeWebSession(ctx, cli, "alice", list[0].ID); err != nil {
		t.Fatal(err)
	}
	br.do("reload after revoke", chromedp.Navigate(c.URL+"/boxes/b1"), chromedp.WaitVisible(chromedp.CSS("main")))
	if loc := br.location(); loc != c.URL+"/login" {
		t.Fatalf("after revoke at %s, want /login", loc)
	}
	br.clean("login")

	// An admin sees every box and the audit log, which names this session's
	// login and its revocation.
	br.do("admin login", chromedp.Navigate(c.link("admin")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	br.waitFor("alice's box for the admin", `document.querySelector('#box-b1')`)
	br.clean("admin fleet")
	br.do("audit", chromedp.Navigate(c.URL+"/audit?user=alice"), chromedp.WaitVisible(chromedp.CSS("table.audit")))
	br.eval(`document.querySelector('table.audit').innerText`, &text)
	for _, want := range []string{"login", "apikey.create"} {
		if !strings.Contains(text, want) {
			t.Errorf("audit page lacks %q:\n%s", want, text)
		}
	}
	br.clean("audit")
	if n := strings.Count(c.logs.String(), "csp violation"); n > 0 {
		t.Errorf("the gateway got %d CSP reports:\n%s", n, c.logs.String())
	}
}

func waitFile(t *testing.T, p string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	t.Fatalf("no download at %s (dir has %v)", p, entries)
	return ""
}

// TestBrowserWithoutJavaScript: with scripts off, plain links and forms do
// the job: log in, read the fleet, answer a question, read the diff and
// the log, download an artifact.
func TestBrowserWithoutJavaScript(t *testing.T) {
	c := newConsole(t, Options{})
	c.core.add("b1", "alice", "the task", "acme/widget", time.Now())
	c.core.write("b1", "some output\n")
	c.core.setFile("b1", "report.txt", []byte("the report\n"))
	c.core.setDiff("b1", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n")
	c.core.ask("b1", "Which fruit?")
	br := chromium(t)
	if _, err := chromedp.Call(br.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#box-b1")))
	if got := text("#box-b1 .task"); got != "the task" {
		t.Errorf("fleet row task %q", got)
	}
	br.do("box", chromedp.Navigate(c.URL+"/boxes/b1"), chromedp.WaitVisible(chromedp.CSS("#question")),
		chromedp.SendKeys(chromedp.CSS("#answer-text"), "pear"), chromedp.Click(chromedp.CSS("#answer-send")),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	if got := text(".flash"); !strings.Contains(got, "Answer sent") {
		t.Errorf("flash %q", got)
	}
	if got := c.core.answered(); !slices.Equal(got, []string{"pear"}) {
		t.Errorf("answers %q", got)
	}
	br.do("diff", chromedp.Click(chromedp.CSS(`#diff noscript a, #diff a[href$="/diff"]`)), chromedp.WaitVisible(chromedp.CSS("table.changed")))
	if got := text(".patch"); !strings.Contains(got, "+new") {
		t.Errorf("diff page %q", got)
	}
	br.do("files", chromedp.Navigate(c.URL+"/boxes/b1/files"), chromedp.WaitVisible(chromedp.CSS(`a[href$="report.txt"]`)),
		chromedp.Click(chromedp.CSS(`a[href$="report.txt"]`)))
	if got := waitFile(t, filepath.Join(br.download, "report.txt")); got != "the report\n" {
		t.Errorf("download %q", got)
	}
	br.do("log", chromedp.Navigate(c.URL+"/boxes/b1/log.txt"), chromedp.WaitVisible(chromedp.CSS("body")))
	if got := text("body"); !strings.Contains(got, "some output") {
		t.Errorf("log text %q", got)
	}
}

// TestBrowserMCPServers adds an MCP server on /settings over the real core,
// is refused a duplicate (the core's message, the headers field empty),
// and removes it: no CSP violation, and the header value never in the DOM.
func TestBrowserMCPServers(t *testing.T) {
	c := newFleetConsole(t)
	const secret = "sk-browser-0123456789abcdef"
	br := chromium(t)
	br.do("log in", chromedp.Navigate(c.link("alice")), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#fleet-rows")))
	secretFree := func(page string) {
		t.Helper()
		var html string
		br.eval(`document.documentElement.outerHTML + [...document.querySelectorAll('input, textarea')].map(e => e.value).join('\n')`, &html)
		if strings.Contains(html, secret) {
			t.Errorf("%s: the header value is in the page", page)
		}
	}
	fill := func(name string) {
		t.Helper()
		br.do("fill the MCP form", chromedp.Navigate(c.URL+"/settings"), chromedp.WaitVisible(chromedp.CSS("#mcp-add")),
			chromedp.SendKeys(chromedp.CSS("#mcp-name"), name),
			chromedp.SendKeys(chromedp.CSS("#mcp-url"), "https://mcp.example.com/mcp"),
			chromedp.SendKeys(chromedp.CSS("#mcp-headers"), "Authorization: Bearer "+secret+"\nX-Team: blue"),
			chromedp.Click(chromedp.CSS("#mcp-add")))
	}
	fill("tools")
	br.waitFor("the added server", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('MCP server tools added') && document.querySelector('#mcp-tools')`)
	var text string
	br.eval(`document.querySelector('#mcp-tools .headers').innerText`, &text)
	if text != "Authorization, X-Team" {
		t.Errorf("header names shown: %q", text)
	}
	secretFree("after add")
	br.clean("settings after MCP add")
	br.screenshot("settings-mcp.png")

	fill("tools")
	br.waitFor("the core's refusal", `document.querySelector('#mcp-error')`)
	br.eval(`document.querySelector('#mcp-error').innerText`, &text)
	if text != `MCP server "tools": conflict` {
		t.Errorf("refusal shown: %q", text)
	}
	var name, headers string
	br.eval(`document.querySelector('#mcp-name').value`, &name)
	br.eval(`document.querySelector('#mcp-headers').value`, &headers)
	if name != "tools" || headers != "" {
		t.Errorf("after the refusal: name %q, headers %q; want the name kept, the headers empty", name, headers)
	}
	secretFree("after the refusal")
	br.clean("settings after a refused MCP add")

	br.do("remove", chromedp.Navigate(c.URL+"/settings"), chromedp.Click(chromedp.CSS(`#mcp-tools form button`)))
	br.waitFor("the removal", `document.querySelector('.flash') && document.querySelector('.flash').innerText.includes('MCP server tools removed') && !document.querySelector('#mcp-tools')`)
	br.clean("settings after MCP remove")
	if list, err := c.fleet.MCPServers(context.Background(), keys.Actor{User: "alice", Role: keys.RoleOperator}); err != nil || len(list) != 0 {
		t.Errorf("the core holds %+v, %v after the removal", list, err)
	}
}
