package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
)

// TestDefaultPresets: a user's default presets are kept per user, replaced
// whole (an empty set clears them), with the change's audit row; in both
// dialects.
func TestDefaultPresets(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
		if got, err := s.DefaultPresets(ctx, "alice"); err != nil || len(got) != 0 || got == nil {
			t.Fatalf("no row: %#v, %v; want an empty list", got, err)
		}
		rec := audit.Entry{Time: time.Now(), Actor: "alice", Front: "ssh", Action: "presets.default", Target: "alice", Result: audit.ResultOK, Detail: "@npm @github"}
		if err := s.SetDefaultPresets(ctx, "alice", []string{"@npm", "@github"}, time.Now(), rec); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDefaultPresets(ctx, "bob", []string{"@pypi"}, time.Now(), audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		other := connect(t) // another gateway sees it
		if got, err := other.DefaultPresets(ctx, "alice"); err != nil || !slices.Equal(got, []string{"@npm", "@github"}) {
			t.Fatalf("alice: %v, %v", got, err)
		}
		if err := s.SetDefaultPresets(ctx, "alice", nil, time.Now(), audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		if got, err := other.DefaultPresets(ctx, "alice"); err != nil || len(got) != 0 {
			t.Fatalf("alice after clearing: %v, %v", got, err)
		}
		if got, err := s.DefaultPresets(ctx, "bob"); err != nil || !slices.Equal(got, []string{"@pypi"}) {
			t.Fatalf("bob: %v, %v", got, err)
		}
		rows, err := s.ListAudit(ctx, audit.Filter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if r.Action == "presets.default" && r.Detail == "@npm @github" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("audit rows of presets.default: %d, want 1 (%+v)", n, rows)
		}
	})
}
