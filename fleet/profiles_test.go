package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/keys"
)

// TestProfilesInTheCore: a user's profiles are their own and shadow the
// site's of the same name; site profiles are an admin's to change;
// per-repository defaults name a profile the user can use; a delegation
// naming an unknown profile, or whose repository's default is gone, is
// refused before anything is created; each change is audited. (A box
// started from a profile: sshd's TestProfilesOverSSH on a real box.)
func TestProfilesInTheCore(t *testing.T) {
	h := fleettest.New(t, fleettest.Options{NoMachines: true, NoAccount: true})
	ctx := context.Background()
	root, alice, bob := h.Actors["root"], h.Actors["alice"], h.Actors["bob"]

	p, err := h.Fleet.SaveProfile(ctx, alice, fleet.Profile{Name: "node", Install: []string{" npm ci "}, Env: []string{"NODE_ENV=test"}, Allow: []string{"NPM"}, MaxDuration: "2h"})
	if err != nil || p.Scope != fleet.ScopeUser || p.Owner != "alice" || !slices.Equal(p.Install, []string{"npm ci"}) || p.MaxDuration != "2h0m0s" || p.Updated.IsZero() {
		t.Fatalf("save: %+v %v", p, err)
	}
	if _, err := h.Fleet.SaveProfile(ctx, alice, fleet.Profile{Name: "node", Scope: fleet.ScopeSite}); !errors.Is(err, fleet.ErrForbidden) {
		t.Errorf("an operator saving a site profile: %v", err)
	}
	if _, err := h.Fleet.SaveProfile(ctx, root, fleet.Profile{Name: "node", Scope: fleet.ScopeSite, Agent: "script"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fleet.SaveProfile(ctx, root, fleet.Profile{Name: "py", Scope: fleet.ScopeSite, Env: []string{"PIP_INDEX_URL=https://pypi.org/simple"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fleet.SaveProfile(ctx, alice, fleet.Profile{Name: "bad", Env: []string{"NPM_TOKEN=x"}}); !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), "NPM_TOKEN") {
		t.Errorf("a secret-looking variable: %v", err)
	}
	if _, err := h.Fleet.SaveProfile(ctx, alice, fleet.Profile{Name: "x", Scope: "world"}); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("scope world: %v", err)
	}

	v, err := h.Fleet.Profiles(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range v.Profiles {
		seen = append(seen, e.Scope+":"+e.Name+":"+map[bool]string{true: "shadowed"}[e.Shadowed])
	}
	if !slices.Equal(seen, []string{"user:node:", "site:node:shadowed", "site:py:"}) {
		t.Errorf("alice's list: %q", seen)
	}
	if got, err := h.Fleet.Profile(ctx, alice, "node"); err != nil || got.Owner != "alice" || got.Agent != "" {
		t.Errorf("alice's node: %+v %v", got, err)
	}
	if got, err := h.Fleet.Profile(ctx, bob, "node"); err != nil || got.Scope != fleet.ScopeSite || got.Agent != "script" {
		t.Errorf("bob's node is the site's: %+v %v", got, err)
	}
	if _, err := h.Fleet.Profile(ctx, bob, "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("no such profile: %v", err)
	}

	d, err := h.Fleet.SetRepoProfile(ctx, alice, " acme/widget ", "node")
	if err != nil || d != (fleet.RepoDefault{Repo: "acme/widget", Profile: "node"}) {
		t.Fatalf("default: %+v %v", d, err)
	}
	if _, err := h.Fleet.SetRepoProfile(ctx, alice, "acme/widget", "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("default to no profile: %v", err)
	}
	if _, err := h.Fleet.SetRepoProfile(ctx, alice, "not a repo", "node"); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("default of a bad repo: %v", err)
	}
	if v, _ := h.Fleet.Profiles(ctx, bob); len(v.Defaults) != 0 {
		t.Errorf("bob sees alice's defaults: %+v", v.Defaults)
	}
	readKey := alice
	readKey.Key = &keys.APIKey{Scopes: []string{"read"}}
	if _, err := h.Fleet.SaveProfile(ctx, readKey, fleet.Profile{Name: "y"}); !errors.Is(err, fleet.ErrScope) {
		t.Errorf("save with a read key: %v", err)
	}

	if _, err := h.Fleet.Delegate(ctx, alice, fleet.DelegateRequest{Task: "x", Profile: "nope"}); !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), `no profile "nope"`) {
		t.Errorf("delegate with an unknown profile: %v", err)
	}
	// bob's default names the site's py; the admin removes it.
	if _, err := h.Fleet.SetRepoProfile(ctx, bob, "acme/widget", "py"); err != nil {
		t.Fatal(err)
	}
	if err := h.Fleet.DeleteProfile(ctx, bob, "py", true); !errors.Is(err, fleet.ErrForbidden) {
		t.Errorf("an operator deleting a site profile: %v", err)
	}
	if err := h.Fleet.DeleteProfile(ctx, root, "py", true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fleet.Delegate(ctx, bob, fleet.DelegateRequest{Task: "x", Repos: []fleet.RepoSpec{{Repo: "acme/widget"}}}); !errors.Is(err, fleet.ErrInvalid) ||
		!strings.Contains(err.Error(), `the default profile of acme/widget, "py", no longer exists`) {
		t.Errorf("delegate whose default is gone: %v", err)
	}
	if boxes, _ := h.Fleet.List(ctx, root); len(boxes) != 0 {
		t.Errorf("refused delegations left boxes: %+v", boxes)
	}
	if _, err := h.Fleet.ClearRepoProfile(ctx, bob, "acme/widget"); err != nil {
		t.Fatal(err)
	}
	if err := h.Fleet.DeleteProfile(ctx, alice, "node", false); err != nil {
		t.Fatal(err)
	}
	if err := h.Fleet.DeleteProfile(ctx, alice, "node", false); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
	if got, err := h.Fleet.Profile(ctx, alice, "node"); err != nil || got.Scope != fleet.ScopeSite {
		t.Errorf("after deleting hers, alice's node is the site's: %+v %v", got, err)
	}

	rows, err := h.Audit.List(ctx, audit.Filter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var acts []string
	for _, r := range rows {
		if strings.HasPrefix(r.Action, "profile.") {
			acts = append(acts, r.Actor+" "+r.Action+" "+r.Target+" "+r.Result)
		}
	}
	slices.Reverse(acts)
	want := []string{
		"alice profile.save alice/node ok", "alice profile.save site/node denied", "root profile.save site/node ok", "root profile.save site/py ok",
		"alice profile.save alice/bad denied", "alice profile.save alice/x denied",
		"alice profile.default acme/widget ok", "alice profile.default acme/widget denied", "alice profile.default not a repo denied",
		"bob profile.default acme/widget ok", "bob profile.delete site/py denied", "root profile.delete site/py ok",
		"bob profile.default acme/widget ok", "alice profile.delete alice/node ok",
	}
	if !slices.Equal(acts, want) {
		t.Errorf("audit rows:\n%s\nwant\n%s", strings.Join(acts, "\n"), strings.Join(want, "\n"))
	}
}
