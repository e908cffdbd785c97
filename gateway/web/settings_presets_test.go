package web

import (
	"context"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestPresetsThroughTheConsole: the settings page lists every preset with
// its hosts and the site's default; a user sets their default set (the
// core's canonical form back), a refused one comes back with the core's
// message and the field as typed and changes nothing; bob's is his own.
func TestPresetsThroughTheConsole(t *testing.T) {
	c := &console{t: t, clock: testutil.NewClock(time.Now())}
	h := fleettest.New(t, fleettest.Options{Now: c.clock.Now, NoAccount: true, NoMachines: true, Users: []fleettest.User{
		{Name: "admin", Role: keys.RoleAdmin}, {Name: "alice", Role: keys.RoleOperator}, {Name: "bob", Role: keys.RoleOperator}},
		Configure: func(fc *fleet.Config) { fc.SitePresets = []string{"@apt"} }})
	c.store, c.logs, c.audit, c.svc, c.fleet, c.token = h.Store, h.Logs, h.Audit, h.Keys, h.Fleet, h.Token
	c.srv = New(Options{Identity: c.svc, Logger: h.Logger, Audit: c.audit, Fleet: c.fleet, Sessions: c.store.SessionStore(nil),
		Throttle: throttle.NewAuth(20, 10*time.Minute, nil), LoginHint: "ssh -p 2222 localhost login"})
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	alice, bob := c.login("alice"), c.login("bob")

	resp, body := send(t, alice, "GET", c.URL+"/settings", nil)
	for _, want := range []string{`id="presets"`, `<td class="mono">@npm</td>`, "registry.npmjs.org", "files.pythonhosted.org",
		`<span id="presets-site" class="mono">@apt</span>`, `id="presets-default" name="presets" class="mono" value=""`} {
		if resp.StatusCode != 200 || !strings.Contains(body, want) {
			t.Fatalf("settings page: %d, no %q in\n%s", resp.StatusCode, want, body)
		}
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/presets", url.Values{"presets": {"npm, @GitHub"}})
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings#presets" {
		t.Fatalf("set: %d %s", resp.StatusCode, body)
	}
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	if !strings.Contains(body, `value="@npm @github"`) || !strings.Contains(body, "Default presets: @npm @github.") {
		t.Errorf("after setting: no stored set or flash in\n%s", body)
	}
	resp, body = send(t, alice, "POST", c.URL+"/settings/presets", url.Values{"presets": {"@npm @nope<b>"}})
	if resp.StatusCode != 400 || !strings.Contains(body, `id="presets-error"`) || !strings.Contains(body, "unknown preset") ||
		!strings.Contains(body, "@rubygems") || !strings.Contains(body, `value="@npm @nope&lt;b&gt;"`) || strings.Contains(body, "<b>") {
		t.Errorf("an unknown preset: %d\n%s", resp.StatusCode, body)
	}
	v, err := c.fleet.Presets(context.Background(), keys.Actor{User: "alice", Role: keys.RoleOperator})
	if err != nil || !slices.Equal(v.Default, []string{"@npm", "@github"}) {
		t.Errorf("after a refused change: %v %v", v.Default, err)
	}
	_, body = send(t, bob, "GET", c.URL+"/settings", nil)
	if !strings.Contains(body, `id="presets-default" name="presets" class="mono" value=""`) {
		t.Errorf("bob sees alice's default set")
	}
	resp, _ = send(t, alice, "POST", c.URL+"/settings/presets", url.Values{"presets": {""}})
	if v, _ := c.fleet.Presets(context.Background(), keys.Actor{User: "alice", Role: keys.RoleOperator}); resp.StatusCode != 303 || len(v.Default) != 0 {
		t.Errorf("clearing: %d %v", resp.StatusCode, v.Default)
	}
}
