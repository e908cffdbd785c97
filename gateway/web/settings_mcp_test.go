package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// newFleetConsole is the console over the real core (fleettest: no box
// boots), real SQLite, keys and sessions; users admin, alice and bob.
func newFleetConsole(t *testing.T) *console {
	t.Helper()
	c := &console{t: t, clock: testutil.NewClock(time.Now())}
	h := fleettest.New(t, fleettest.Options{MaxBoxes: 2, Now: c.clock.Now, NoAccount: true, Users: []fleettest.User{
		{Name: "admin", Role: keys.RoleAdmin}, {Name: "alice", Role: keys.RoleOperator}, {Name: "bob", Role: keys.RoleOperator}}})
	c.store, c.logs, c.audit, c.svc, c.fleet, c.token = h.Store, h.Logs, h.Audit, h.Keys, h.Fleet, h.Token
	c.srv = New(Options{Identity: c.svc, Logger: h.Logger, Audit: c.audit, Fleet: c.fleet, Sessions: c.store.SessionStore(nil),
		Throttle: throttle.NewAuth(20, 10*time.Minute, nil), LoginHint: "ssh -p 2222 localhost login"})
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	return c
}

// emptyHeaders is the headers textarea with nothing in it.
var emptyHeaders = regexp.MustCompile(`<textarea id="mcp-headers"[^>]*></textarea>`)

// TestMCPServersThroughTheConsole: add, list, refuse, remove an MCP server
// from /settings over the real core. The secret header values never come
// back: not in a page, a redirect, the flash, the log or the database in
// clear.
func TestMCPServersThroughTheConsole(t *testing.T) {
	c := newFleetConsole(t)
	ctx := context.Background()
	alice, bob := c.login("alice"), c.login("bob")
	const secret, teamSecret = "sk-mcp-0123456789abcdef", "team-secret-42"
	// seen collects every answer's body and headers, to search for the
	// secrets at the end.
	var seen strings.Builder
	add := url.Values{"name": {"tools"}, "url": {"https://mcp.example.com/mcp"},
		"headers": {"Authorization: Bearer " + secret + "\r\n\r\nX-Team:  " + teamSecret + "\r\n"}}
	resp, body := send(t, alice, "POST", c.URL+"/settings/mcp", add)
	fmt.Fprint(&seen, resp.Header, body)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings" {
		t.Fatalf("add: %d %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	resp, body = send(t, alice, "GET", c.URL+"/settings", nil)
	fmt.Fprint(&seen, resp.Header, body)
	if resp.StatusCode != 200 {
		t.Fatalf("settings: %d", resp.StatusCode)
	}
	row, _, _ := strings.Cut(body[max(strings.Index(body, `id="mcp-tools"`), 0):], "</tr>")
	for _, want := range []string{"https://mcp.example.com/mcp", `<td class="headers">Authorization, X-Team</td>`,
		"http://10.0.2.100/mcp/tools", `action="/settings/mcp/tools/delete"`} {
		if !strings.Contains(row, want) {
			t.Errorf("the server's row lacks %q:\n%s", want, row)
		}
	}
	if !strings.Contains(body, "MCP server tools added") {
		t.Errorf("no flash after add:\n%s", body)
	}
	list, err := c.fleet.MCPServers(ctx, keys.Actor{User: "alice", Role: keys.RoleOperator})
	if err != nil || len(list) != 1 || list[0].Name != "tools" || strings.Join(list[0].Headers, ",") != "Authorization,X-Team" {
		t.Fatalf("the core holds %+v, %v", list, err)
	}
	// Another user sees none of it.
	if _, body := send(t, bob, "GET", c.URL+"/settings", nil); strings.Contains(body, `id="mcp-tools"`) || !strings.Contains(body, "No MCP server.") {
		t.Errorf("bob's settings list alice's server")
	}

	// Refused by the core: its message and status, the name and URL as
	// typed, the headers textarea empty.
	for _, tc := range []struct {
		name, url, headers string
		status             int
		msg                string
	}{
		{"bad-url", "ftp://mcp.example.com/x", "Authorization: Bearer " + secret, 400,
			`MCP server URL &#34;ftp://mcp.example.com/x&#34;: want http(s)://host/path: invalid`},
		{"tools", "https://other.example.com/mcp", "Authorization: Bearer " + secret, 409, `MCP server &#34;tools&#34;: conflict`},
		{"Bad Name", "https://mcp.example.com/mcp", "Authorization: Bearer " + secret, 400, `MCP server name &#34;Bad Name&#34;: want 1-32`},
		{"no-colon", "https://mcp.example.com/mcp", "X-Ok: 1\nAuthorization Bearer " + secret, 400, `header line 2: want &#34;Name: value&#34;: invalid`},
		{"bad-header", "https://mcp.example.com/mcp", "Bad Header: " + secret, 400, `header &#34;Bad Header&#34;: want a header name and a one-line value: invalid`},
		{"too-long", "https://mcp.example.com/mcp", "A: " + strings.Repeat("x", 70<<10) + secret, 400, `headers: more than 65536 bytes: invalid`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := send(t, alice, "POST", c.URL+"/settings/mcp", url.Values{"name": {tc.name}, "url": {tc.url}, "headers": {tc.headers}})
			fmt.Fprint(&seen, resp.Header, body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d:\n%s", resp.StatusCode, tc.status, body)
			}
			if !strings.Contains(body, `<p id="mcp-error" class="error" role="alert">`) || !strings.Contains(body, tc.msg) {
				t.Errorf("the page lacks the core's message %q:\n%s", tc.msg, body)
			}
			if !strings.Contains(body, `value="`+tc.name+`"`) || !strings.Contains(body, `value="`+tc.url+`"`) {
				t.Errorf("the name and URL as typed are not kept")
			}
			if !emptyHeaders.MatchString(body) {
				t.Errorf("the headers textarea is not empty: %s", regexp.MustCompile(`<textarea id="mcp-headers"[^>]*>[^<]*`).FindString(body))
			}
		})
	}
	if list, _ := c.fleet.MCPServers(ctx, keys.Actor{User: "alice", Role: keys.RoleOperator}); len(list) != 1 || list[0].URL != "https://mcp.example.com/mcp" {
		t.Fatalf("after the refusals the core holds %+v", list)
	}

	// Without a session, or from another site, nothing changes.
	if resp, _ := send(t, browser(t), "POST", c.URL+"/settings/mcp/tools/delete", url.Values{}); resp.StatusCode != 401 {
		t.Errorf("remove without a session: %d, want 401", resp.StatusCode)
	}
	for _, hdr := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}} {
		resp, body := send(t, alice, "POST", c.URL+"/settings/mcp", url.Values{"name": {"evil"}, "url": {"https://evil.example/mcp"}}, hdr...)
		if resp.StatusCode != 403 {
			t.Errorf("cross-origin add %s: %d, want 403: %s", hdr, resp.StatusCode, body)
		}
		if resp, _ := send(t, alice, "POST", c.URL+"/settings/mcp/tools/delete", url.Values{}, hdr...); resp.StatusCode != 403 {
			t.Errorf("cross-origin remove %s: %d, want 403", hdr, resp.StatusCode)
		}
	}
	if list, _ := c.fleet.MCPServers(ctx, keys.Actor{User: "alice", Role: keys.RoleOperator}); len(list) != 1 || list[0].Name != "tools" {
		t.Fatalf("after the refused POSTs the core holds %+v", list)
	}

	// Bob cannot remove alice's server: it answers as a missing one does.
	_, missing := send(t, bob, "POST", c.URL+"/settings/mcp/nope/delete", url.Values{})
	resp, body = send(t, bob, "POST", c.URL+"/settings/mcp/tools/delete", url.Values{})
	if resp.StatusCode != 404 || !strings.Contains(body, `MCP server &#34;tools&#34;: not found`) ||
		!strings.Contains(missing, `MCP server &#34;nope&#34;: not found`) {
		t.Fatalf("bob removing alice's server: %d:\n%s", resp.StatusCode, body)
	}
	if list, _ := c.fleet.MCPServers(ctx, keys.Actor{User: "alice", Role: keys.RoleOperator}); len(list) != 1 {
		t.Fatalf("bob removed alice's server")
	}

	// Alice removes it.
	resp, body = send(t, alice, "POST", c.URL+"/settings/mcp/tools/delete", url.Values{})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings" {
		t.Fatalf("remove: %d %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	if !strings.Contains(body, "MCP server tools removed.") || !strings.Contains(body, "No MCP server.") || strings.Contains(body, `id="mcp-tools"`) {
		t.Errorf("settings after remove:\n%s", body)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/settings/mcp/tools/delete", url.Values{}); resp.StatusCode != 404 {
		t.Errorf("removing it again: %d, want 404", resp.StatusCode)
	}

	// The core wrote the audit rows, from the web front: the adds it
	// refused too (a headers text that does not parse never reaches it).
	rows, err := c.audit.List(ctx, audit.Filter{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range rows {
		if strings.HasPrefix(e.Action, "mcp.server.") {
			if e.Front != "web" {
				t.Errorf("audit row %s from front %q", e.Action, e.Front)
			}
			got[e.Action+" "+e.Result]++
		}
	}
	if got["mcp.server.add ok"] != 1 || got["mcp.server.add error"] != 4 || got["mcp.server.rm ok"] != 1 {
		t.Errorf("audit rows %v", got)
	}

	// The secrets were nowhere: not in an answer, the gateway's log, the
	// audit log or the database in clear.
	for _, p := range []string{c.store.Path(), c.store.Path() + "-wal"} {
		b, _ := os.ReadFile(p)
		seen.Write(b)
	}
	seen.WriteString(c.logs.String())
	for _, e := range rows {
		fmt.Fprint(&seen, e)
	}
	for _, s := range []string{secret, teamSecret} {
		if strings.Contains(seen.String(), s) {
			t.Errorf("the header value %q came back", s)
		}
	}
}
