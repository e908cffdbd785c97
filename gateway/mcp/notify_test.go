package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestNotifyTools: notify_add (the webhook's secret returned once),
// notify_list (never a secret), notify_test (the real receiver checks the
// signature with the Standard Webhooks library), notify_remove; a read key
// cannot add; bob cannot see or touch alice's channels.
func TestNotifyTools(t *testing.T) {
	hook := fleettest.NewReceiver(t, "webhook")
	tr, err := netpolicy.ParseTrusts([]string{hook.HostPort()})
	if err != nil {
		t.Fatal(err)
	}
	clk := testutil.NewClock(time.Now())
	h := fleettest.New(t, fleettest.Options{Now: clk.Now, NoMachines: true, NoAccount: true,
		Configure: func(c *fleet.Config) { c.PrivateUpstreams = tr }})
	o := Options{Fleet: h.Fleet, Identity: h.Keys, Audit: h.Audit, Now: clk.Now, Logger: h.Logger,
		Throttle: throttle.NewAuth(20, 10*time.Minute, clk.Now)}
	f := &front{keys: h.Keys, audit: h.Audit, clock: clk, admin: keys.Actor{User: "root", Role: keys.RoleAdmin, Front: keys.FrontCLI}}
	f.url = serve(t, New(o))
	aliceTok, _ := f.token(t, "alice", "write")
	aliceRead, _ := f.token(t, "alice", "read")
	bobTok, _ := f.token(t, "bob", "write")
	alice := mustConnect(t, f.url, aliceTok, stateful)
	ro := mustConnect(t, f.url, aliceRead, stateless)
	bob := mustConnect(t, f.url, bobTok, stateless)
	call := func(cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}

	added := out[ChannelOut](t, call(alice, "notify_add", map[string]any{"name": "hook", "kind": "webhook", "url": hook.URL(), "events": []string{"done", "failed"}}))
	if !strings.HasPrefix(added.Secret, "whsec_") || strings.Join(added.Events, ",") != "done,failed" || !added.Enabled {
		t.Fatalf("notify_add: %+v", added)
	}
	hook.SetSecret(added.Secret)
	res := call(alice, "notify_list", nil)
	list := out[ChannelsOut](t, res)
	if len(list.Channels) != 1 || list.Channels[0].Secret != "" || strings.Contains(text(res), strings.TrimPrefix(added.Secret, "whsec_")) {
		t.Errorf("notify_list: %+v", list)
	}
	if got := out[TestOut](t, call(alice, "notify_test", map[string]any{"name": "hook"})); !got.Delivered || got.HTTPStatus != 200 {
		t.Errorf("notify_test: %+v", got)
	}
	if g := hook.All(); len(g) != 1 || g[0].Bad != "" || g[0].Note["type"] != "test" {
		t.Errorf("receiver: %+v", g)
	}
	if got := out[DeliveriesOut](t, call(ro, "notify_log", map[string]any{"name": "hook"})); len(got.Deliveries) != 1 ||
		got.Deliveries[0].Status != fleet.DeliveryDelivered || got.Deliveries[0].LastStatus != 200 {
		t.Errorf("notify_log: %+v", got)
	}
	if got := out[ChannelOut](t, call(alice, "notify_enable", map[string]any{"name": "hook", "enabled": false})); got.Enabled {
		t.Errorf("notify_enable false: %+v", got)
	}
	if got := out[ChannelsOut](t, call(alice, "notify_list", nil)); len(got.Channels) != 1 || got.Channels[0].Enabled {
		t.Errorf("after disabling: %+v", got)
	}
	if got := out[ChannelOut](t, call(alice, "notify_enable", map[string]any{"name": "hook", "enabled": true})); !got.Enabled {
		t.Errorf("notify_enable true: %+v", got)
	}
	hook.Respond(func(int) (int, string) { return 410, "" })
	if res := call(alice, "notify_test", map[string]any{"name": "hook"}); !res.IsError || !strings.Contains(text(res), "HTTP 410") {
		t.Errorf("notify_test of a refusing receiver: %s", text(res))
	}

	for _, c := range []struct {
		cs   *sdk.ClientSession
		tool string
		args map[string]any
		says string
	}{
		{ro, "notify_add", map[string]any{"name": "x", "kind": "ntfy", "url": "https://ntfy.example.com/t"}, "scope"},
		{alice, "notify_add", map[string]any{"name": "x", "kind": "ntfy", "url": "http://10.0.0.1/t"}, "RFC 1918"},
		{alice, "notify_add", map[string]any{"name": "x", "kind": "pager", "url": "https://example.com/"}, "want webhook, ntfy or slack"},
		{bob, "notify_remove", map[string]any{"name": "hook"}, "not found"},
		{bob, "notify_test", map[string]any{"name": "hook"}, "not found"},
		{bob, "notify_enable", map[string]any{"name": "hook", "enabled": false}, "not found"},
		{bob, "notify_log", map[string]any{"name": "hook"}, "not found"},
		{ro, "notify_enable", map[string]any{"name": "hook", "enabled": false}, "scope"},
	} {
		if res := call(c.cs, c.tool, c.args); !res.IsError || !strings.Contains(text(res), c.says) {
			t.Errorf("%s %v: %s, want an error saying %q", c.tool, c.args, text(res), c.says)
		}
	}
	if got := out[ChannelsOut](t, call(bob, "notify_list", nil)); len(got.Channels) != 0 {
		t.Errorf("bob lists %+v", got)
	}
	if got := out[RemovedOut](t, call(alice, "notify_remove", map[string]any{"name": "hook"})); !got.Removed {
		t.Errorf("notify_remove: %+v", got)
	}
	if got := out[ChannelsOut](t, call(ro, "notify_list", nil)); len(got.Channels) != 0 {
		t.Errorf("after remove: %+v", got)
	}
}
