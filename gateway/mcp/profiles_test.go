package mcp

import (
	"context"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/keys"
)

// TestProfileTools: profile_set saves the caller's profile (canonical),
// refuses a secret-looking variable and a site profile from an operator;
// profiles lists it with the caller's repository default (profile_default);
// profile_delete removes it; a read key only reads; bob's are his own.
func TestProfileTools(t *testing.T) {
	clk := testutil.NewClock(time.Now())
	h := fleettest.New(t, fleettest.Options{Now: clk.Now, NoMachines: true, NoAccount: true})
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

	p := out[fleet.Profile](t, call(alice, "profile_set", map[string]any{"name": "node", "install": []string{" npm ci "}, "env": []string{"NODE_ENV=test"},
		"allow": []string{"@NPM"}, "max_duration": "90m", "agent": "script", "cpus": 1}))
	if p.Scope != fleet.ScopeUser || !slices.Equal(p.Install, []string{"npm ci"}) || !slices.Equal(p.Allow, []string{"@npm"}) || p.MaxDuration != "1h30m0s" || p.VCPUs != 1 {
		t.Fatalf("profile_set: %+v", p)
	}
	wantToolError(t, call(alice, "profile_set", map[string]any{"name": "leaky", "env": []string{"AWS_SECRET_ACCESS_KEY=x"}}), "looks like it carries a secret")
	wantToolError(t, call(alice, "profile_set", map[string]any{"name": "shared", "site": true}), "only an admin")
	wantToolError(t, call(ro, "profile_set", map[string]any{"name": "x"}), `"write" scope`)
	d := out[fleet.RepoDefault](t, call(alice, "profile_default", map[string]any{"repo": "acme/widget", "profile": "node"}))
	if d != (fleet.RepoDefault{Repo: "acme/widget", Profile: "node"}) {
		t.Errorf("profile_default: %+v", d)
	}
	wantToolError(t, call(alice, "profile_default", map[string]any{"repo": "acme/widget", "profile": "nope"}), `no profile "nope"`)
	v := out[fleet.ProfilesView](t, call(ro, "profiles", nil))
	if len(v.Profiles) != 1 || v.Profiles[0].Name != "node" || !slices.Equal(v.Defaults, []fleet.RepoDefault{{Repo: "acme/widget", Profile: "node"}}) {
		t.Errorf("profiles: %+v", v)
	}
	if v := out[fleet.ProfilesView](t, call(bob, "profiles", nil)); len(v.Profiles) != 0 || len(v.Defaults) != 0 {
		t.Errorf("bob sees alice's: %+v", v)
	}
	wantToolError(t, call(bob, "profile_delete", map[string]any{"name": "node"}), "not found")
	if got := out[ProfileDeleteOut](t, call(alice, "profile_delete", map[string]any{"name": "node"})); got.Removed != "node" {
		t.Errorf("profile_delete: %+v", got)
	}
	if v := out[fleet.ProfilesView](t, call(alice, "profiles", nil)); len(v.Profiles) != 0 || len(v.Defaults) != 0 {
		t.Errorf("after profile_delete (its default goes with it): %+v", v)
	}
}
