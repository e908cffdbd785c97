package web

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestProfilesThroughTheConsole: the settings page saves a profile from
// its form (lists one a line), lists it, fills the form to edit it, sets a
// repository's default and removes it; a refused profile comes back with
// the core's message and the form as typed and saves nothing; the site
// checkbox is an admin's, and an operator posting it is forbidden; the
// delegate form offers the caller's profiles.
func TestProfilesThroughTheConsole(t *testing.T) {
	c := &console{t: t, clock: testutil.NewClock(time.Now())}
	h := fleettest.New(t, fleettest.Options{Now: c.clock.Now, NoAccount: true, NoMachines: true, Users: []fleettest.User{
		{Name: "admin", Role: keys.RoleAdmin}, {Name: "alice", Role: keys.RoleOperator}, {Name: "bob", Role: keys.RoleOperator}}})
	c.store, c.logs, c.audit, c.svc, c.fleet, c.token = h.Store, h.Logs, h.Audit, h.Keys, h.Fleet, h.Token
	c.srv = New(Options{Identity: c.svc, Logger: h.Logger, Audit: c.audit, Fleet: c.fleet, Sessions: c.store.SessionStore(nil),
		Throttle: throttle.NewAuth(20, 10*time.Minute, nil), LoginHint: "ssh -p 2222 localhost login"})
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	alice, bob, admin := c.login("alice"), c.login("bob"), c.login("admin")
	aliceActor := keys.Actor{User: "alice", Role: keys.RoleOperator}

	resp, body := send(t, alice, "GET", c.URL+"/settings", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `id="profiles-none"`) || strings.Contains(body, `name="site"`) {
		t.Fatalf("settings page: %d\n%s", resp.StatusCode, body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/profiles", url.Values{"name": {"node"}, "install": {"npm ci\r\n\r\nnpm run build"},
		"env": {"NODE_ENV=test\nCOLOR=1"}, "allow": {"@npm, example.com"}, "memory": {"2048"}, "max_duration": {"90m"}, "agent": {"script"}})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings#profiles" {
		t.Fatalf("save: %d %s", resp.StatusCode, body)
	}
	p, err := c.fleet.Profile(context.Background(), aliceActor, "node")
	if err != nil || strings.Join(p.Install, "|") != "npm ci|npm run build" || strings.Join(p.Env, "|") != "NODE_ENV=test|COLOR=1" ||
		strings.Join(p.Allow, " ") != "@npm example.com" || p.MemoryMiB != 2048 || p.MaxDuration != "1h30m0s" || p.Agent != "script" {
		t.Fatalf("saved: %+v %v", p, err)
	}
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	if !strings.Contains(body, `id="profile-user-node"`) || !strings.Contains(body, "Profile node saved (user).") || !strings.Contains(body, "npm ci; npm run build") {
		t.Errorf("after saving: no row or flash in\n%s", body)
	}
	_, body = send(t, alice, "GET", c.URL+"/settings?profile=node", nil)
	if !strings.Contains(body, `id="profile-name" name="name" class="mono" value="node"`) || !strings.Contains(body, "NODE_ENV=test\nCOLOR=1</textarea>") {
		t.Errorf("edit: the form is not filled in\n%s", body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/profiles", url.Values{"name": {"leaky"}, "env": {"GITHUB_TOKEN=<b>x</b>"}})
	if resp.StatusCode != 400 || !strings.Contains(body, `id="profile-error"`) || !strings.Contains(body, "GITHUB_TOKEN looks like it carries a secret") ||
		!strings.Contains(body, "GITHUB_TOKEN=&lt;b&gt;x&lt;/b&gt;</textarea>") || strings.Contains(body, "<b>x") {
		t.Errorf("a refused profile: %d\n%s", resp.StatusCode, body)
	}
	if _, err := c.fleet.Profile(context.Background(), aliceActor, "leaky"); err == nil {
		t.Errorf("a refused profile was saved")
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/settings/profiles", url.Values{"name": {"shared"}, "site": {"1"}}); resp.StatusCode != 403 {
		t.Errorf("an operator's site profile: %d", resp.StatusCode)
	}
	if _, body := send(t, admin, "GET", c.URL+"/settings", nil); !strings.Contains(body, `name="site" value="1"`) {
		t.Errorf("an admin has no site checkbox")
	}
	if resp, body := send(t, admin, "POST", c.URL+"/settings/profiles", url.Values{"name": {"shared"}, "site": {"1"}}); resp.StatusCode != 303 {
		t.Errorf("an admin's site profile: %d %s", resp.StatusCode, body)
	}

	resp, body = send(t, alice, "POST", c.URL+"/settings/profiles/default", url.Values{"repo": {"acme/widget"}, "profile": {"node"}})
	if resp.StatusCode != 303 {
		t.Fatalf("default: %d %s", resp.StatusCode, body)
	}
	if _, body = send(t, alice, "GET", c.URL+"/settings", nil); !strings.Contains(body, `<td class="mono">acme/widget</td><td class="mono">node</td>`) {
		t.Errorf("no default row in\n%s", body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/profiles/default", url.Values{"repo": {"acme/widget"}, "profile": {"nope"}})
	if resp.StatusCode != 404 || !strings.Contains(body, `id="profile-default-error"`) || !strings.Contains(body, `no profile &#34;nope&#34;`) {
		t.Errorf("default to no profile: %d\n%s", resp.StatusCode, body)
	}
	if _, body = send(t, alice, "GET", c.URL+"/delegate", nil); !strings.Contains(body, `<option value="node">node</option>`) || !strings.Contains(body, `<option value="shared">shared</option>`) {
		t.Errorf("the delegate form does not offer alice's profiles\n%s", body)
	}
	if _, body = send(t, bob, "GET", c.URL+"/settings", nil); strings.Contains(body, `id="profile-user-node"`) || !strings.Contains(body, `id="profile-site-shared"`) {
		t.Errorf("bob sees alice's profile, or not the site's")
	}
	if resp, _ := send(t, bob, "POST", c.URL+"/settings/profiles/node/delete", url.Values{}); resp.StatusCode != 404 {
		t.Errorf("bob removing alice's profile: %d", resp.StatusCode)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/settings/profiles/node/delete", url.Values{}); resp.StatusCode != 303 {
		t.Errorf("remove: %d", resp.StatusCode)
	}
	if _, err := c.fleet.Profile(context.Background(), aliceActor, "node"); err == nil {
		t.Errorf("the profile outlived its removal")
	}
}
