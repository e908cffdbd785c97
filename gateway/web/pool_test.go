package web

import (
	"context"
	"maps"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

var (
	poolTarget = regexp.MustCompile(`<td id="pool-target">(\d+)</td>`)
	poolField  = regexp.MustCompile(`<input id="pool-size"[^>]* value="([^"]*)"`)
)

// TestPoolThroughTheConsole: the warm pool's page and form over the real
// core (without machines: boots fail, the target is what is set). An
// admin sees it, linked from the navigation, and sets the target; a bad
// size gets the core's message (or, not a number, the form's) with 400 and
// the size as typed; an operator gets the core's Forbidden on both routes,
// and no link; a cross-site or session-less POST changes nothing.
func TestPoolThroughTheConsole(t *testing.T) {
	c := newNotifyConsole(t)
	ctx := context.Background()
	admin, alice := c.login("admin"), c.login("alice")
	root := keys.Actor{User: "admin", Role: keys.RoleAdmin}
	target := func() int {
		t.Helper()
		st, err := c.fleet.Pool(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		return st.Target
	}

	resp, body := send(t, admin, "GET", c.URL+"/pool", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("admin GET /pool: %d:\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{`<a href="/pool">Pool</a>`, `<td id="pool-target">0</td>`, `<td id="pool-ready">0</td>`,
		`<td id="pool-booting">0</td>`, `<form class="stack narrow" method="post" action="/pool">`, `max="64"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the pool page lacks %q:\n%s", want, body)
		}
	}
	if m := poolField.FindStringSubmatch(body); m == nil || m[1] != "0" {
		t.Errorf("the size field holds %q, want the target 0", m)
	}

	resp, body = send(t, admin, "POST", c.URL+"/pool", url.Values{"size": {" 3 "}})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/pool" {
		t.Fatalf("set 3: %d %q:\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if got := target(); got != 3 {
		t.Fatalf("the core's target is %d after setting 3", got)
	}
	_, body = send(t, admin, "GET", c.URL+"/pool", nil)
	if !strings.Contains(body, "Warm pool target set to 3") {
		t.Errorf("no flash after set:\n%s", body)
	}
	if m := poolTarget.FindStringSubmatch(body); m == nil || m[1] != "3" {
		t.Errorf("the page shows target %q, want 3", m)
	}

	// Refused: the message, 400, the size as typed, the target unchanged.
	for _, tc := range []struct{ name, size, msg string }{
		{"negative", "-1", `pool size -1: want 0 to 64: invalid`},
		{"over the limit", "65", `pool size 65: want 0 to 64: invalid`},
		{"not a number", "two", `size &#34;two&#34;: want a whole number such as 2: invalid`},
		{"a fraction", "1.5", `size &#34;1.5&#34;: want a whole number such as 2: invalid`},
		{"empty", "", `size &#34;&#34;: want a whole number such as 2: invalid`},
		{"overflow", "99999999999999999999", `size &#34;99999999999999999999&#34;: want a whole number`},
		{"markup", `<b>1</b>`, `size &#34;&lt;b&gt;1&lt;/b&gt;&#34;: want a whole number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := send(t, admin, "POST", c.URL+"/pool", url.Values{"size": {tc.size}})
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400:\n%s", resp.StatusCode, body)
			}
			if !strings.Contains(body, `<p id="pool-error" class="error" role="alert">`) || !strings.Contains(body, tc.msg) {
				t.Errorf("the page lacks the message %q:\n%s", tc.msg, body)
			}
			if m := poolField.FindStringSubmatch(body); m == nil || m[1] != strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(tc.size) {
				t.Errorf("the size field holds %q, want %q as typed", m, tc.size)
			}
			if m := poolTarget.FindStringSubmatch(body); m == nil || m[1] != "3" {
				t.Errorf("the refused page shows target %q, want 3", m)
			}
			if strings.Contains(body, "<b>") {
				t.Errorf("the typed markup is live in the page")
			}
		})
	}
	if got := target(); got != 3 {
		t.Fatalf("the refusals changed the target to %d", got)
	}

	// An operator: the core's Forbidden, no link, no change.
	_, home := send(t, alice, "GET", c.URL+"/", nil)
	if strings.Contains(home, `href="/pool"`) || !strings.Contains(home, `href="/settings"`) {
		t.Errorf("an operator's navigation links the pool (or lacks settings)")
	}
	if _, adminHome := send(t, admin, "GET", c.URL+"/", nil); !strings.Contains(adminHome, `<a href="/pool">Pool</a>`) {
		t.Errorf("an admin's navigation lacks the pool")
	}
	for _, method := range []string{"GET", "POST"} {
		var form url.Values
		if method == "POST" {
			form = url.Values{"size": {"0"}}
		}
		resp, body := send(t, alice, method, c.URL+"/pool", form)
		if resp.StatusCode != 403 || !strings.Contains(body, "the warm pool is for admins: forbidden") {
			t.Errorf("alice %s /pool: %d, want 403 with the core's message:\n%s", method, resp.StatusCode, body)
		}
		if strings.Contains(body, `id="pool-target"`) {
			t.Errorf("alice %s /pool shows the pool", method)
		}
	}
	// Bad input from an operator is still the core's Forbidden: who may set
	// the pool is decided before what they set it to.
	if resp, _ := send(t, alice, "POST", c.URL+"/pool", url.Values{"size": {"-1"}}); resp.StatusCode != 403 {
		t.Errorf("alice POST /pool size=-1: %d, want 403", resp.StatusCode)
	}

	// Without a session, or from another site, nothing changes.
	if resp, _ := send(t, browser(t), "POST", c.URL+"/pool", url.Values{"size": {"0"}}); resp.StatusCode != 401 {
		t.Errorf("POST /pool without a session: %d, want 401", resp.StatusCode)
	}
	for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}} {
		if resp, body := send(t, admin, "POST", c.URL+"/pool", url.Values{"size": {"0"}}, hdr...); resp.StatusCode != 403 {
			t.Errorf("cross-origin POST /pool %s: %d, want 403: %s", hdr, resp.StatusCode, body)
		}
	}
	if got := target(); got != 3 {
		t.Fatalf("refused POSTs changed the target to %d", got)
	}

	resp, _ = send(t, admin, "POST", c.URL+"/pool", url.Values{"size": {"0"}})
	if resp.StatusCode != 303 || target() != 0 {
		t.Fatalf("set 0: %d, target %d", resp.StatusCode, target())
	}

	// The core wrote the audit rows, from the web front: the sets it took
	// and alice's it refused (an out-of-range size is refused before it is
	// an action, as over SSH and MCP).
	rows, err := c.audit.List(ctx, audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range rows {
		if e.Action == "pool.set" {
			if e.Front != "web" {
				t.Errorf("audit row %s from front %q", e.Action, e.Front)
			}
			got[e.Actor+" "+e.Target+" "+e.Result]++
		}
	}
	if want := map[string]int{"admin 3 ok": 1, "admin 0 ok": 1, "alice 0 denied": 1, "alice -1 denied": 1}; !maps.Equal(got, want) {
		t.Errorf("audit rows %v, want %v", got, want)
	}
}

// TestPoolWithoutTheCore: a console whose core has no warm pool (the
// scripted one) says so with 503 on both routes, for admins too.
func TestPoolWithoutTheCore(t *testing.T) {
	c := newConsole(t, Options{})
	admin := c.login("admin")
	for _, method := range []string{"GET", "POST"} {
		var form url.Values
		if method == "POST" {
			form = url.Values{"size": {"1"}}
		}
		resp, body := send(t, admin, method, c.URL+"/pool", form)
		if resp.StatusCode != 503 || !strings.Contains(body, "the warm pool is not available") {
			t.Errorf("%s /pool without a pool: %d, want 503:\n%s", method, resp.StatusCode, body)
		}
	}
}
