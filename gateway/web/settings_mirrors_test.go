package web

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestMirrorsThroughTheConsole: every user's settings page lists the
// internal mirrors, the site's and the admins', read-only (no form, and no
// route changes them).
func TestMirrorsThroughTheConsole(t *testing.T) {
	c := &console{t: t, clock: testutil.NewClock(time.Now())}
	h := fleettest.New(t, fleettest.Options{Now: c.clock.Now, NoAccount: true, NoMachines: true, Users: []fleettest.User{
		{Name: "admin", Role: keys.RoleAdmin}, {Name: "alice", Role: keys.RoleOperator}},
		Configure: func(fc *fleet.Config) { fc.SiteMirrors = []string{"site-pypi 10.60.1.2:8080"} }})
	c.store, c.logs, c.audit, c.svc, c.fleet, c.token = h.Store, h.Logs, h.Audit, h.Keys, h.Fleet, h.Token
	c.srv = New(Options{Identity: c.svc, Logger: h.Logger, Audit: c.audit, Fleet: c.fleet, Sessions: c.store.SessionStore(nil),
		Throttle: throttle.NewAuth(20, 10*time.Minute, nil), LoginHint: "ssh -p 2222 localhost login"})
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	alice := c.login("alice")

	_, body := send(t, alice, "GET", c.URL+"/settings", nil)
	if !strings.Contains(body, `<tr id="mirror-site-pypi"><td class="mono">site-pypi</td><td class="mono">10.60.1.2:8080</td><td class="mono">10.60.1.2/32</td><td>configuration (net.mirrors)</td>`) {
		t.Fatalf("no site mirror in\n%s", body)
	}
	if _, err := c.fleet.AddMirror(context.Background(), h.Actors["admin"], "corp-npm", "npm.corp.example:4873", []string{"10.20.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	resp, body := send(t, alice, "GET", c.URL+"/settings", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `<td class="mono">npm.corp.example:4873</td><td class="mono">10.20.0.0/16</td><td>added by admin</td>`) {
		t.Fatalf("no admin's mirror in\n%s", body)
	}
	section := body[strings.Index(body, `<section id="mirrors">`):]
	section = section[:strings.Index(section, "</section>")]
	if strings.Contains(section, "<form") || strings.Contains(section, "<input") {
		t.Errorf("the mirrors section is not read-only:\n%s", section)
	}
	if resp, _ := send(t, alice, "POST", c.URL+"/settings/mirrors", nil); resp.StatusCode < 400 {
		t.Errorf("POST /settings/mirrors: %d, want no such route", resp.StatusCode)
	}
}
