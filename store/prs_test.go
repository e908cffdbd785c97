package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
)

// TestBoxPRs: a pull request's row is saved and replaced by box, repo and
// number, listed newest first, found among the open ones until it is not
// open, refused for an unknown box, and goes with its box.
func TestBoxPRs(t *testing.T) {
	eachDialect(t, func(t *testing.T, connect func(testing.TB) *Store) {
		ctx := context.Background()
		a, b := connect(t), connect(t)
		if err := a.InsertBox(ctx, fleet.BoxDoc{Name: "fix", Owner: "erin", State: "done", Doc: []byte(`{}`)}, testRec); err != nil {
			t.Fatal(err)
		}
		at := time.Unix(1700000000, 123)
		pr := fleet.PRDoc{Box: "fix", Owner: "erin", Repo: "acme/widget", Number: 7, Account: "work", URL: "https://git.example/acme/widget/pulls/7",
			Base: "main", Head: "sbx/fix", HeadSHA: "aaa", State: "open", Checks: "pending", Card: []byte(`{"number":7}`), Updated: at}
		if err := a.PutPR(ctx, pr, testRec); err != nil {
			t.Fatal(err)
		}
		older := pr
		older.Number, older.State = 3, "closed"
		if err := b.PutPR(ctx, older, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		pr.HeadSHA, pr.Checks = "bbb", "success"
		if err := b.PutPR(ctx, pr, audit.Entry{}); err != nil {
			t.Fatal(err)
		}
		list, err := a.ListPRs(ctx, "fix")
		if err != nil || len(list) != 2 || list[0].Number != 7 || list[0].HeadSHA != "bbb" || list[0].Checks != "success" ||
			!list[0].Updated.Equal(at) || string(list[0].Card) != `{"number":7}` || list[1].Number != 3 {
			t.Fatalf("prs of fix: %+v %v", list, err)
		}
		open, err := b.OpenPRs(ctx)
		if err != nil || len(open) != 1 || open[0].Number != 7 {
			t.Fatalf("open prs: %+v %v", open, err)
		}
		pr.State = "merged"
		if err := a.PutPR(ctx, pr, testRec); err != nil {
			t.Fatal(err)
		}
		if open, _ := b.OpenPRs(ctx); len(open) != 0 {
			t.Fatalf("a merged pull request is still open: %+v", open)
		}
		// The digest's "what merged": the owner's, since the day began.
		if m, err := b.MergedPRs(ctx, "erin", at.Add(-time.Hour)); err != nil || len(m) != 1 || m[0].Number != 7 {
			t.Fatalf("merged since: %+v %v", m, err)
		}
		if m, _ := b.MergedPRs(ctx, "erin", at.Add(time.Hour)); len(m) != 0 {
			t.Fatalf("merged before the window: %+v", m)
		}
		if m, _ := b.MergedPRs(ctx, "frank", at.Add(-time.Hour)); len(m) != 0 {
			t.Fatalf("another owner's merged pull requests: %+v", m)
		}
		ghost := pr
		ghost.Box = "nobox"
		if err := a.PutPR(ctx, ghost, testRec); !errors.Is(err, fleet.ErrNotFound) {
			t.Fatalf("pull request of an unknown box: %v", err)
		}
		if err := a.DeleteBox(ctx, "fix", testRec); err != nil {
			t.Fatal(err)
		}
		if list, _ := b.ListPRs(ctx, "fix"); len(list) != 0 {
			t.Fatalf("pull requests outlived their box: %+v", list)
		}
	})
}
