package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// TestMirrors: mirrors are added once per name (a second is a conflict),
// seen by another gateway, removed (a missing one is not found), each
// change with its audit row; in both dialects.
func TestMirrors(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		s := connect(t)
		if got, err := s.Mirrors(ctx); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("none: %#v, %v", got, err)
		}
		at := time.Unix(1700000000, 5).UTC()
		m := fleet.MirrorInfo{Name: "corp", Host: "npm.corp.example:4873", Ranges: []string{"10.20.0.0/16", "10.30.0.1/32"}, AddedBy: "root", Created: at}
		rec := audit.Entry{Time: at, Actor: "root", Front: "ssh", Action: "net.mirror.add", Target: "corp", Result: audit.ResultOK}
		if err := s.AddMirror(ctx, m, rec); err != nil {
			t.Fatal(err)
		}
		if err := s.AddMirror(ctx, m, rec); !errors.Is(err, fleet.ErrConflict) {
			t.Fatalf("second add: %v, want a conflict", err)
		}
		other := connect(t)
		got, err := other.Mirrors(ctx)
		if err != nil || len(got) != 1 || got[0].Name != "corp" || got[0].Host != m.Host || !slices.Equal(got[0].Ranges, m.Ranges) ||
			got[0].AddedBy != "root" || !got[0].Created.Equal(at) || got[0].Source != fleet.MirrorFromAdmin {
			t.Fatalf("another gateway sees %+v, %v", got, err)
		}
		if err := s.RemoveMirror(ctx, "nope", audit.Entry{}); !errors.Is(err, fleet.ErrNotFound) {
			t.Fatalf("remove missing: %v", err)
		}
		if err := other.RemoveMirror(ctx, "corp", audit.Entry{Time: at, Actor: "root", Front: "ssh", Action: "net.mirror.remove", Target: "corp", Result: audit.ResultOK}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Mirrors(ctx); err != nil || len(got) != 0 {
			t.Fatalf("after remove: %+v, %v", got, err)
		}
		rows, err := s.ListAudit(ctx, audit.Filter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			if r.Target == "corp" && (r.Action == "net.mirror.add" || r.Action == "net.mirror.remove") {
				n++
			}
		}
		if n != 2 {
			t.Errorf("audit rows: %d, want 2 (%+v)", n, rows)
		}
	})
}
