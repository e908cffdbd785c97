package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// TestProfiles: a user's profiles are their own, the site's everyone's;
// saving replaces, deleting a user's profile takes its repository defaults
// with it (unless a site profile of the name stands in); each change is
// written with its audit row; in both dialects.
func TestProfiles(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
		at := time.Unix(1700000000, 0).UTC()
		put := func(scope, owner, name, body string, rec audit.Entry) {
			t.Helper()
			if err := s.PutProfile(ctx, fleet.StoredProfile{Scope: scope, Owner: owner, Name: name, Body: []byte(body), Updated: at}, rec); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := s.ListProfiles(ctx, "alice"); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("none: %#v %v", got, err)
		}
		rec := audit.Entry{Time: at, Actor: "alice", Front: "ssh", Action: "profile.save", Target: "alice/node", Result: audit.ResultOK, Detail: "install=1"}
		put("user", "alice", "node", `{"install":["npm ci"]}`, rec)
		put("user", "alice", "node", `{"install":["npm ci","npm test"]}`, audit.Entry{})
		put("user", "bob", "node", `{}`, audit.Entry{})
		put("site", "", "node", `{"agent":"script"}`, audit.Entry{})
		put("site", "", "py", `{}`, audit.Entry{})
		other := connect(t) // another gateway sees them
		got, err := other.ListProfiles(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range got {
			names = append(names, p.Scope+":"+p.Owner+":"+p.Name)
		}
		if !slices.Equal(names, []string{"user:alice:node", "site::node", "site::py"}) || string(got[0].Body) != `{"install":["npm ci","npm test"]}` || !got[0].Updated.Equal(at) {
			t.Fatalf("alice's list: %q %s", names, got[0].Body)
		}
		if err := s.SetRepoProfile(ctx, "alice", "acme/widget", "node", at, audit.Entry{Actor: "alice", Action: "profile.default", Target: "acme/widget", Result: audit.ResultOK, Time: at}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRepoProfile(ctx, "alice", "acme/gadget", "py", at, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetRepoProfile(ctx, "alice", "acme/gadget", "node", at, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		if d, err := other.RepoProfiles(ctx, "alice"); err != nil || !slices.Equal(d, []fleet.RepoDefault{{Repo: "acme/gadget", Profile: "node"}, {Repo: "acme/widget", Profile: "node"}}) {
			t.Fatalf("defaults: %+v %v", d, err)
		}
		if d, err := s.RepoProfiles(ctx, "bob"); err != nil || d == nil || len(d) != 0 {
			t.Fatalf("bob's defaults: %#v %v", d, err)
		}
		// alice's node goes, the site's node stands in: her defaults stay.
		if ok, err := s.DeleteProfile(ctx, "user", "alice", "node", audit.Entry{}); !ok || err != nil {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if d, _ := s.RepoProfiles(ctx, "alice"); len(d) != 2 {
			t.Errorf("defaults after deleting a shadowing profile: %+v", d)
		}
		if ok, err := s.DeleteProfile(ctx, "user", "alice", "node", audit.Entry{}); ok || err != nil {
			t.Fatalf("delete twice: %v %v", ok, err)
		}
		// bob's node goes with no site stand-in after the site's is gone.
		if err := s.SetRepoProfile(ctx, "bob", "acme/widget", "node", at, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.DeleteProfile(ctx, "site", "", "node", audit.Entry{}); !ok || err != nil {
			t.Fatalf("delete site: %v %v", ok, err)
		}
		if ok, err := s.DeleteProfile(ctx, "user", "bob", "node", audit.Entry{}); !ok || err != nil {
			t.Fatalf("delete bob's: %v %v", ok, err)
		}
		if d, _ := s.RepoProfiles(ctx, "bob"); len(d) != 0 {
			t.Errorf("bob's default outlived its profile: %+v", d)
		}
		if err := s.SetRepoProfile(ctx, "alice", "acme/gadget", "", at, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.RepoProfiles(ctx, "alice"); !slices.Equal(d, []fleet.RepoDefault{{Repo: "acme/widget", Profile: "node"}}) {
			t.Errorf("after clearing: %+v", d)
		}
		rows, err := s.ListAudit(ctx, audit.Filter{Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		var acts []string
		for _, r := range rows {
			acts = append(acts, r.Action+" "+r.Target)
		}
		if !slices.Equal(acts, []string{"profile.default acme/widget", "profile.save alice/node"}) {
			t.Errorf("audit rows: %q", acts)
		}
	})
}
