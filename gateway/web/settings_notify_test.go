package web

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// newNotifyConsole is the console over the real core without machines,
// trusting the receivers' loopback addresses as net.private_upstreams does.
func newNotifyConsole(t *testing.T, recv ...*fleettest.Receiver) *console {
	t.Helper()
	var trust []string
	for _, r := range recv {
		trust = append(trust, r.HostPort())
	}
	tr, err := netpolicy.ParseTrusts(trust)
	if err != nil {
		t.Fatal(err)
	}
	c := &console{t: t, clock: testutil.NewClock(time.Now())}
	h := fleettest.New(t, fleettest.Options{Now: c.clock.Now, NoAccount: true, NoMachines: true, Users: []fleettest.User{
		{Name: "admin", Role: keys.RoleAdmin}, {Name: "alice", Role: keys.RoleOperator}, {Name: "bob", Role: keys.RoleOperator}},
		Configure: func(fc *fleet.Config) { fc.PrivateUpstreams = tr }})
	c.store, c.logs, c.audit, c.svc, c.fleet, c.token = h.Store, h.Logs, h.Audit, h.Keys, h.Fleet, h.Token
	c.srv = New(Options{Identity: c.svc, Logger: h.Logger, Audit: c.audit, Fleet: c.fleet, Sessions: c.store.SessionStore(nil),
		Throttle: throttle.NewAuth(20, 10*time.Minute, nil), LoginHint: "ssh -p 2222 localhost login"})
	ts := httptest.NewServer(c.srv)
	t.Cleanup(ts.Close)
	c.URL = ts.URL
	return c
}

var newSecret = regexp.MustCompile(`<pre id="new-channel-secret" class="mono">(whsec_[A-Za-z0-9+/=]+)</pre>`)

// TestNotifyChannelsThroughTheConsole: add a webhook (its secret shown in
// that response only), an ntfy channel with a token; send a test (the
// receiver verifies the signature); see the delivery log; disable, remove;
// a refused add keeps the form without its secret; bob sees nothing of it.
func TestNotifyChannelsThroughTheConsole(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	ntfy := fleettest.NewReceiver(t, "ntfy")
	c := newNotifyConsole(t, hook, ntfy)
	alice, bob := c.login("alice"), c.login("bob")
	var seen strings.Builder

	resp, body := send(t, alice, "POST", c.URL+"/settings/notify", url.Values{"name": {"hook"}, "kind": {"webhook"}, "url": {hook.URL()}, "events": {"done, failed"}})
	m := newSecret.FindStringSubmatch(body)
	if resp.StatusCode != 201 || m == nil {
		t.Fatalf("add webhook: %d\n%s", resp.StatusCode, body)
	}
	hook.SetSecret(m[1])
	const token = "tk_consoleToken_0815"
	resp, body = send(t, alice, "POST", c.URL+"/settings/notify", url.Values{"name": {"phone"}, "kind": {"ntfy"}, "url": {ntfy.URL()}, "secret": {token}, "digest": {"1"}})
	fmt.Fprint(&seen, resp.Header, body)
	if resp.StatusCode != 303 || resp.Header.Get("Location") != "/settings#notify" {
		t.Fatalf("add ntfy: %d %s", resp.StatusCode, body)
	}
	ntfy.SetSecret(token)

	resp, body = send(t, alice, "POST", c.URL+"/settings/notify/hook/test", nil)
	fmt.Fprint(&seen, resp.Header, body)
	if resp.StatusCode != 303 {
		t.Fatalf("test: %d %s", resp.StatusCode, body)
	}
	if g := hook.All(); len(g) != 1 || g[0].Bad != "" {
		t.Fatalf("receiver: %+v", g)
	}
	ntfy.Respond(func(int) (int, string) { return 401, "" })
	send(t, alice, "POST", c.URL+"/settings/notify/phone/test", nil)
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	fmt.Fprint(&seen, body)
	for _, want := range []string{`id="channel-hook"`, "done, failed", `action="/settings/notify/hook/test"`, `id="log-hook"`,
		"test : delivered", "(HTTP 200)", `id="channel-phone"`, `<span class="badge">digest</span>`, "HTTP 401", "not delivered"} {
		if !strings.Contains(body, want) {
			t.Errorf("settings lack %q", want)
		}
	}
	if strings.Contains(body, m[1]) {
		t.Error("the webhook secret shows again")
	}

	// Refused: the form comes back as typed, without its secret.
	resp, body = send(t, alice, "POST", c.URL+"/settings/notify", url.Values{"name": {"x"}, "kind": {"webhook"}, "url": {"http://10.1.1.1/h"}, "secret": {"whsec_dGhpcy1pcy1ub3QtYS12YWxpZC1zZWNyZXQtYXQtYWxs"}})
	fmt.Fprint(&seen, resp.Header, body)
	if resp.StatusCode != 400 || !strings.Contains(body, `id="notify-error"`) || !strings.Contains(body, "RFC 1918") || !strings.Contains(body, `value="http://10.1.1.1/h"`) {
		t.Errorf("refused add: %d\n%s", resp.StatusCode, body)
	}

	if _, body := send(t, bob, "GET", c.URL+"/settings", nil); strings.Contains(body, `id="channel-hook"`) {
		t.Error("bob's settings list alice's channel")
	}
	if resp, _ := send(t, bob, "POST", c.URL+"/settings/notify/hook/delete", nil); resp.StatusCode != 404 {
		t.Errorf("bob removing alice's channel: %d", resp.StatusCode)
	}
	send(t, alice, "POST", c.URL+"/settings/notify/phone/disable", nil)
	send(t, alice, "POST", c.URL+"/settings/notify/hook/delete", nil)
	_, body = send(t, alice, "GET", c.URL+"/settings", nil)
	fmt.Fprint(&seen, body)
	if strings.Contains(body, `id="channel-hook"`) || !strings.Contains(body, `action="/settings/notify/phone/enable"`) {
		t.Errorf("after disable and remove:\n%s", body)
	}
	for _, s := range []string{token, "dGhpcy1pcy1ub3Q"} {
		if strings.Contains(seen.String(), s) || strings.Contains(c.logs.String(), s) {
			t.Errorf("a secret shows in a page or the log: %q", s)
		}
	}
}
