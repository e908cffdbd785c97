package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
	"sbx.dev/sbx/keys"
)

// TestMirrorsInTheCore: every user lists the mirrors, the site's first;
// only an admin adds or removes one, each change audited and a refusal
// audited too; bad input is Invalid, a taken or configured name a
// Conflict, a missing one NotFound, and nothing changes on a refusal; a
// bad net.mirrors stops the core. (A box's grant: the gateway's
// TestMirrorNpmInstall, on a real box.)
func TestMirrorsInTheCore(t *testing.T) {
	h := fleettest.New(t, fleettest.Options{NoMachines: true, NoAccount: true,
		Configure: func(c *fleet.Config) { c.SiteMirrors = []string{"site-npm npm.site.example 10.50.0.0/16"} }})
	ctx := context.Background()
	root, alice := h.Actors["root"], h.Actors["alice"]

	for _, tc := range []struct {
		who          keys.Actor
		name, host   string
		ranges       []string
		want         error
		says, result string
	}{
		{alice, "corp", "npm.corp.example", []string{"10.20.0.0/16"}, fleet.ErrForbidden, "admins", audit.ResultDenied},
		{root, "corp", "npm.corp.example", nil, fleet.ErrInvalid, "name the range", audit.ResultDenied},
		{root, "corp", "*.corp.example", []string{"10.0.0.0/8"}, fleet.ErrInvalid, "wildcard", audit.ResultDenied},
		{root, "corp", "npm.corp.example", []string{"0.0.0.0/0"}, fleet.ErrInvalid, "too broad", audit.ResultDenied},
		{root, "npm", "npm.corp.example", []string{"10.0.0.0/8"}, fleet.ErrInvalid, "preset", audit.ResultDenied},
		{root, "site-npm", "npm.corp.example", []string{"10.0.0.0/8"}, fleet.ErrConflict, "net.mirrors", audit.ResultDenied},
	} {
		if _, err := h.Fleet.AddMirror(ctx, tc.who, tc.name, tc.host, tc.ranges); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("add %s %s %v as %s: %v; want %v saying %q", tc.name, tc.host, tc.ranges, tc.who.User, err, tc.want, tc.says)
		}
	}
	m, err := h.Fleet.AddMirror(ctx, root, "Corp", "NPM.corp.example:4873", []string{"10.20.3.4/16"})
	if err != nil || m.Name != "corp" || m.Host != "npm.corp.example:4873" || len(m.Ranges) != 1 || m.Ranges[0] != "10.20.0.0/16" || m.AddedBy != "root" {
		t.Fatalf("add: %+v %v", m, err)
	}
	if _, err := h.Fleet.AddMirror(ctx, root, "corp", "other.example", []string{"10.1.0.0/16"}); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("a taken name: %v", err)
	}
	list, err := h.Fleet.Mirrors(ctx, alice)
	if err != nil || len(list) != 2 || list[0].Name != "site-npm" || list[0].Source != fleet.MirrorFromConfig || list[1].Name != "corp" || list[1].Source != fleet.MirrorFromAdmin {
		t.Fatalf("alice lists %+v %v", list, err)
	}
	for _, tc := range []struct {
		who  keys.Actor
		name string
		want error
	}{
		{alice, "corp", fleet.ErrForbidden},
		{root, "site-npm", fleet.ErrConflict},
		{root, "nosuch", fleet.ErrNotFound},
		{root, "bad name", fleet.ErrInvalid},
	} {
		if err := h.Fleet.RemoveMirror(ctx, tc.who, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("remove %q as %s: %v, want %v", tc.name, tc.who.User, err, tc.want)
		}
	}
	if list, _ := h.Fleet.Mirrors(ctx, alice); len(list) != 2 {
		t.Fatalf("refused removals changed the list: %+v", list)
	}
	if err := h.Fleet.RemoveMirror(ctx, root, "corp"); err != nil {
		t.Fatal(err)
	}
	if list, _ := h.Fleet.Mirrors(ctx, alice); len(list) != 1 {
		t.Fatalf("after removal: %+v", list)
	}
	rows, err := h.Audit.List(ctx, audit.Filter{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rows {
		if strings.HasPrefix(r.Action, "net.mirror.") {
			count[r.Action+" "+r.Actor+" "+r.Result]++
		}
	}
	for k, n := range map[string]int{
		"net.mirror.add sbx ok":          1, // the site's, at start
		"net.mirror.add root ok":         1,
		"net.mirror.add alice denied":    1,
		"net.mirror.remove root ok":      1,
		"net.mirror.remove alice denied": 1,
	} {
		if count[k] != n {
			t.Errorf("audit %q: %d rows, want %d (%v)", k, count[k], n, count)
		}
	}
	h.Fleet.Close()
	h.Config.SiteMirrors = []string{"corp npm.corp.example"}
	if _, err := fleet.New(ctx, h.Config); err == nil || !strings.Contains(err.Error(), "net.mirrors") {
		t.Errorf("a bad net.mirrors: %v", err)
	}
	h.Fleet = nil
}
