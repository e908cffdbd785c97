package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/keys"
)

// TestPresetsInTheCore: the view names every preset, the caller's default
// and the site's; setting a default is the caller's own, canonical and
// audited, an unknown name refused and nothing changed; a delegation
// naming an unknown preset is refused before anything is created; a site
// default naming an unknown preset stops the core. (A box's grant: the
// gateway's TestPresetGrantKeepsAddressPolicy and sshd's
// TestPresetsOverSSH, on real boxes.)
func TestPresetsInTheCore(t *testing.T) {
	h := fleettest.New(t, fleettest.Options{NoMachines: true, NoAccount: true,
		Configure: func(c *fleet.Config) { c.SitePresets = []string{"go", "@GO", "@apt"} }})
	ctx := context.Background()
	alice, bob := h.Actors["alice"], h.Actors["bob"]
	v, err := h.Fleet.Presets(ctx, alice)
	if err != nil || len(v.Presets) != 8 || len(v.Default) != 0 || !slices.Equal(v.Site, []string{"@go", "@apt"}) {
		t.Fatalf("presets: %+v %v", v, err)
	}
	got, err := h.Fleet.SetDefaultPresets(ctx, alice, []string{"NPM", "@github", "@npm"})
	if err != nil || !slices.Equal(got, []string{"@npm", "@github"}) {
		t.Fatalf("set: %q %v", got, err)
	}
	if _, err := h.Fleet.SetDefaultPresets(ctx, alice, []string{"@pypi", "@nope"}); !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), "@rubygems") {
		t.Errorf("an unknown preset: %v", err)
	}
	if v, _ := h.Fleet.Presets(ctx, alice); !slices.Equal(v.Default, []string{"@npm", "@github"}) {
		t.Errorf("after a refused change: %q", v.Default)
	}
	if v, _ := h.Fleet.Presets(ctx, bob); len(v.Default) != 0 {
		t.Errorf("bob sees alice's default: %q", v.Default)
	}
	readKey := alice
	readKey.Key = &keys.APIKey{Scopes: []string{"read"}}
	if _, err := h.Fleet.SetDefaultPresets(ctx, readKey, []string{"@go"}); !errors.Is(err, fleet.ErrScope) {
		t.Errorf("with a read key: %v", err)
	}
	if _, err := h.Fleet.Delegate(ctx, alice, fleet.DelegateRequest{Agent: "script", Task: "x", Allow: []string{"@npm", "@nope"}}); !errors.Is(err, fleet.ErrInvalid) ||
		!strings.Contains(err.Error(), "unknown preset @nope") {
		t.Errorf("delegate with an unknown preset: %v", err)
	}
	if boxes, _ := h.Fleet.List(ctx, alice); len(boxes) != 0 {
		t.Errorf("a refused delegation left boxes: %+v", boxes)
	}
	h.Fleet.Close()
	h.Config.SitePresets = []string{"@nope"}
	if _, err := fleet.New(ctx, h.Config); err == nil || !strings.Contains(err.Error(), "net.default_presets") || !strings.Contains(err.Error(), "unknown preset @nope") {
		t.Errorf("a site default naming an unknown preset: %v", err)
	}
	h.Fleet = nil
}
