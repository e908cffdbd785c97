package sshd

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
)

// TestPresetsOverSSH drives the egress presets through the real OpenSSH
// client against a real box: presets lists them, presets default sets the
// user's set, new --allow @npm keeps the name on the box (with the
// default joined), the box network's grant holds the expansion (and the
// site's preset), allow BOX @pypi adds one, an unknown preset is a usage
// error naming the known ones and changes nothing.
func TestPresetsOverSSH(t *testing.T) {
	g := newGatewayFrom(t, fleettest.Options{NoAccount: true, Configure: func(c *fleet.Config) { c.SitePresets = []string{"@apt"} }}, nil)

	out := g.must("alice", "presets")
	for _, want := range []string{"PRESET", "@npm", "registry.npmjs.org", "@pypi", "files.pythonhosted.org", "@github", "codeload.github.com",
		"your default: none", "site default: @apt"} {
		if !strings.Contains(out, want) {
			t.Fatalf("presets: no %q in\n%s", want, out)
		}
	}
	var v fleet.PresetsView
	if err := json.Unmarshal([]byte(g.must("alice", "presets", "--json")), &v); err != nil || len(v.Presets) != 8 || !slices.Equal(v.Site, []string{"@apt"}) {
		t.Fatalf("presets --json: %+v %v", v, err)
	}
	if out := g.must("alice", "presets", "default", "github"); !strings.Contains(out, "your default presets: @github") {
		t.Fatalf("presets default github: %q", out)
	}
	if r := g.run("alice", "", "presets", "default", "@nope"); r.code != exitInvalid || !strings.Contains(r.stderr, "unknown preset @nope (known: @apt") {
		t.Fatalf("presets default @nope: %+v", r)
	}
	if out := g.must("alice", "presets", "default"); !strings.Contains(out, "your default presets: @github") {
		t.Fatalf("a refused default changed it: %q", out)
	}

	var b struct {
		Name  string
		Allow []string
	}
	if err := json.Unmarshal([]byte(g.must("alice", "new", "--json", "--agent", "script", "--allow", "@NPM", "--allow", "example.com", `"!say hi"`)), &b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Allow, []string{"@npm", "example.com", "@github"}) {
		t.Fatalf("new --allow @NPM --allow example.com with the default @github: allow %q", b.Allow)
	}
	if out := g.must("alice", "status", b.Name); !strings.Contains(out, "@npm example.com @github") {
		t.Errorf("status does not show the presets by name:\n%s", out)
	}
	// The box network's grant: the names expanded, the site's included.
	grant := func() []string {
		t.Helper()
		machines := g.vms.List()
		if len(machines) != 1 {
			t.Fatalf("machines %+v, want the box's one", machines)
		}
		gr, err := g.fleet.NetGrant(context.Background(), machines[0].Name)
		if err != nil || gr.Box != b.Name {
			t.Fatalf("grant %+v %v", gr, err)
		}
		return gr.Allow
	}
	got := grant()
	for _, want := range []string{"deb.debian.org", "registry.npmjs.org", "registry.yarnpkg.com", "example.com", "github.com", "raw.githubusercontent.com"} {
		if !slices.Contains(got, want) {
			t.Errorf("grant %q lacks %s", got, want)
		}
	}
	for _, e := range got {
		if strings.HasPrefix(e, "@") || e == "pypi.org" {
			t.Errorf("grant %q holds %s", got, e)
		}
	}

	if out := g.must("alice", "allow", b.Name, "@pypi"); !strings.Contains(out, "@npm example.com @github @pypi") {
		t.Errorf("allow @pypi: %q", out)
	}
	if got := grant(); !slices.Contains(got, "pypi.org") || !slices.Contains(got, "files.pythonhosted.org") {
		t.Errorf("grant after allow @pypi: %q", got)
	}
	r := g.run("alice", "", "allow", "--json", b.Name, "@nope")
	var e struct{ Error, Kind string }
	if json.Unmarshal([]byte(r.stderr), &e) != nil || r.code != exitInvalid || e.Kind != "invalid" || !strings.Contains(e.Error, "unknown preset @nope (known: @apt, @crates") {
		t.Errorf("allow @nope: %+v", r)
	}
	if out := g.must("alice", "allow", "--set", b.Name, "@go"); !strings.Contains(out, "may reach: @go") {
		t.Errorf("allow --set @go: %q", out)
	}
	if r := g.run("alice", "", "new", "--agent", "script", "--allow", "@", `"!say x"`); r.code != exitInvalid || !strings.Contains(r.stderr, "want a preset name") {
		t.Errorf("new --allow @: %+v", r)
	}
	if r := g.run("bob", "", "allow", b.Name, "@npm"); r.code != exitNotFound {
		t.Errorf("bob: allow on alice's box: %+v", r)
	}
}
