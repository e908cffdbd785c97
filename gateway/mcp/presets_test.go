package mcp

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestPresetTools: presets lists every preset with its hosts, the caller's
// default and the site's; presets_default sets the caller's own (audited),
// refuses an unknown name naming the known ones and a read key; bob's
// default is his own.
func TestPresetTools(t *testing.T) {
	clk := testutil.NewClock(time.Now())
	h := fleettest.New(t, fleettest.Options{Now: clk.Now, NoMachines: true, NoAccount: true,
		Configure: func(c *fleet.Config) { c.SitePresets = []string{"github"} }})
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

	v := out[fleet.PresetsView](t, call(ro, "presets", nil))
	var npm []string
	for _, p := range v.Presets {
		if p.Name == "npm" {
			npm = p.Entries
		}
	}
	if len(v.Presets) != 8 || !slices.Contains(npm, "registry.npmjs.org") || len(v.Default) != 0 || !slices.Equal(v.Site, []string{"@github"}) {
		t.Fatalf("presets: %+v", v)
	}
	got := out[PresetsDefaultOut](t, call(alice, "presets_default", map[string]any{"presets": []string{"@npm", "PyPI", "@npm"}}))
	if !slices.Equal(got.Default, []string{"@npm", "@pypi"}) {
		t.Errorf("presets_default: %+v", got)
	}
	if v := out[fleet.PresetsView](t, call(alice, "presets", nil)); !slices.Equal(v.Default, []string{"@npm", "@pypi"}) {
		t.Errorf("presets after setting: %+v", v.Default)
	}
	if v := out[fleet.PresetsView](t, call(bob, "presets", nil)); len(v.Default) != 0 {
		t.Errorf("bob sees a default he never set: %+v", v.Default)
	}
	wantToolError(t, call(alice, "presets_default", map[string]any{"presets": []string{"@nope"}}), "unknown preset @nope", "@npm")
	wantToolError(t, call(ro, "presets_default", map[string]any{"presets": []string{"@go"}}), `"write" scope`)
	if v := out[fleet.PresetsView](t, call(alice, "presets", nil)); !slices.Equal(v.Default, []string{"@npm", "@pypi"}) {
		t.Errorf("a refused change changed the default: %+v", v.Default)
	}
	if got := out[PresetsDefaultOut](t, call(alice, "presets_default", map[string]any{"presets": []string{}})); len(got.Default) != 0 {
		t.Errorf("clearing: %+v", got)
	}
	rows, err := h.Audit.List(context.Background(), audit.Filter{User: "alice", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	for _, r := range rows {
		if r.Action == "presets.default" {
			set = append(set, r.Result+":"+r.Detail)
		}
	}
	if len(set) != 3 || !strings.HasPrefix(set[0], "ok:none") || !strings.HasPrefix(set[1], "denied:") || set[2] != "ok:@npm @pypi" {
		t.Errorf("presets.default audit rows (newest first): %q", set)
	}
}
