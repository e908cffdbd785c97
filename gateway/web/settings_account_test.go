package web

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestAccountAddThroughTheConsole: the settings form adds an account with
// no probe repository (the token is checked with the forge's API); the
// flash names the login, scopes and expiry, the token only masked. A token
// the forge refuses is a 400 that says so, and nothing is saved.
func TestAccountAddThroughTheConsole(t *testing.T) {
	c := newFleetConsole(t)
	alice := c.login("alice")
	resp, body := send(t, alice, "POST", c.URL+"/settings/accounts", url.Values{"name": {"work"}, "token": {c.token}, "probe": {""}})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings" {
		t.Fatalf("add: %d %q: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	body = html.UnescapeString(body)
	for _, want := range []string{"GitHub account work added (token", "…" + c.token[len(c.token)-4:], "login alice-gh", "scopes repo, workflow", "expires 20"} {
		if !strings.Contains(body, want) {
			t.Errorf("settings after add lacks %q", want)
		}
	}
	// The accounts table keeps saying whose the token is and when it
	// expires (stored at add time), not only the flash.
	if !regexp.MustCompile(`<td>alice-gh</td><td class="mono">[^<]*</td><td class="expiry">20[0-9-]+ [0-9:]+ UTC \(in 29 days\)</td>`).MatchString(body) {
		t.Errorf("the accounts table lacks the login and expiry:\n%s", body)
	}
	if strings.Contains(body, c.token) {
		t.Fatal("the token came back to the browser")
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/accounts", url.Values{"name": {"bad"}, "token": {"ghp_" + strings.Repeat("Z", 36)}})
	if resp.StatusCode != 400 || !strings.Contains(body, "token rejected by the git host") {
		t.Fatalf("refused token: %d: %s", resp.StatusCode, body)
	}
	if _, body = send(t, alice, "GET", c.URL+"/settings", nil); strings.Contains(body, ">bad<") {
		t.Fatal("a refused token was saved")
	}
}
