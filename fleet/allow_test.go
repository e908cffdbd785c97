package fleet_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// TestEditAllowUnderTheLock: edits of a box's allow-list land whole even
// when fronts send them at once (the list as it is when each lands, not as
// a front last read it), take entries out by their canonical form, and a
// bad edit changes nothing; each edit is an audit row.
func TestEditAllowUnderTheLock(t *testing.T) {
	e := newEnv(t, fleet.Policy{})
	ctx := e.ctx()
	b, err := e.fleet.Delegate(ctx, e.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := e.fleet.EditAllow(ctx, e.alice, b.Name, []string{fmt.Sprintf("d%d.example.com", i)}, nil); err != nil {
				t.Errorf("edit %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got, err := e.fleet.Get(ctx, e.alice, b.Name)
	if err != nil || len(got.Allow) != n {
		t.Fatalf("after %d concurrent adds: %q %v", n, got.Allow, err)
	}
	// Out by its canonical form (case, a default port), in with another.
	got, err = e.fleet.EditAllow(ctx, e.alice, b.Name, []string{"pypi.org", "pypi.org"}, []string{"D0.Example.COM"})
	if err != nil || slices.Contains(got.Allow, "d0.example.com") || !slices.Contains(got.Allow, "pypi.org") || len(got.Allow) != n {
		t.Fatalf("remove d0, add pypi.org: %q %v", got.Allow, err)
	}
	before := got.Allow
	for what, edit := range map[string]func() error{
		"nothing": func() error { _, err := e.fleet.EditAllow(ctx, e.alice, b.Name, nil, nil); return err },
		"a bad domain": func() error {
			_, err := e.fleet.EditAllow(ctx, e.alice, b.Name, []string{"ok.example.com", "not a domain"}, nil)
			return err
		},
		"too many": func() error {
			var many []string
			for i := range fleet.MaxAllow {
				many = append(many, fmt.Sprintf("m%d.example.com", i))
			}
			_, err := e.fleet.EditAllow(ctx, e.alice, b.Name, many, nil) // with the 8 there: past the cap
			return err
		},
	} {
		if err := edit(); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("an edit with %s: %v, want invalid", what, err)
		}
	}
	if got, _ := e.fleet.Get(ctx, e.alice, b.Name); !slices.Equal(got.Allow, before) {
		t.Errorf("a refused edit changed the list: %q, was %q", got.Allow, before)
	}
	if _, err := e.fleet.EditAllow(ctx, e.bob, b.Name, []string{"x.example.com"}, nil); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("bob editing alice's box: %v", err)
	}
	list, err := e.Audit.List(ctx, audit.Filter{User: "alice", Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, r := range list {
		if r.Action == "box.allow" && r.Target == b.Name && r.Result == "ok" {
			rows++
		}
	}
	if rows != n+1 {
		t.Errorf("%d box.allow audit rows, want %d", rows, n+1)
	}
}
