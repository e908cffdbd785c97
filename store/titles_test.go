package store

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/pgtest"
)

// TestTitleMigrationDerivesFromTask: boxes of a database from before
// titles get the title the core derives from their task (fleet.DefaultTitle)
// when 0009 runs, in both dialects; a new write keeps the title it is given.
func TestTitleMigrationDerivesFromTask(t *testing.T) {
	long := "  fix the flaky\ttest in\x07 the widget package and then make sure every other package still builds\nsecond line"
	for _, c := range []struct {
		name, driver string
		d            dialect
		dsn          func(t *testing.T) string
		open         func(t *testing.T, dsn string) *Store
	}{
		{"sqlite", "sqlite", sqliteDialect(), func(t *testing.T) string { return dsn(filepath.Join(t.TempDir(), "sbx.db"), false) },
			func(t *testing.T, _ string) *Store { return nil }},
		{"postgres", "pgx", postgresDialect(), func(t *testing.T) string { return pgtest.FreshDB(t) },
			func(t *testing.T, dsn string) *Store { return openPostgres(t, dsn) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsnText := c.dsn(t)
			db, err := sql.Open(c.driver, dsnText)
			if err != nil {
				t.Fatal(err)
			}
			old := &Store{d: c.d, writer: db, reader: db}
			ms, err := c.d.migrations()
			if err != nil {
				t.Fatal(err)
			}
			var before []migration
			for _, m := range ms {
				if m.version < 9 {
					before = append(before, m)
				}
			}
			if err := old.apply(ctx, before); err != nil {
				t.Fatal(err)
			}
			for name, task := range map[string]string{"long-1": long, "short-1": "hello world", "broken-1": ""} {
				d, _ := json.Marshal(map[string]string{"name": name, "task": task})
				if name == "broken-1" {
					d = []byte("{not json")
				}
				if _, err := old.write().exec(ctx, "INSERT INTO boxes (name, owner, state, doc, created, updated) VALUES (?, 'alice', 'running', ?, 1, 1)", name, string(d)); err != nil {
					t.Fatal(err)
				}
			}
			if err := old.apply(ctx, ms); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"long-1": fleet.DefaultTitle(long), "short-1": "hello world", "broken-1": ""}
			if want["long-1"] != "fix the flaky test in the widget package and then make sure…" {
				t.Fatalf("DefaultTitle(long) = %q", want["long-1"])
			}
			for name, title := range want {
				b, err := old.GetBox(ctx, name)
				if err != nil || b.Title != title {
					t.Errorf("box %s after 0009: title %q, %v; want %q", name, b.Title, err, title)
				}
			}
			b, _ := old.GetBox(ctx, "short-1")
			b.Title = "renamed"
			if err := old.UpdateBox(ctx, b, testRec); err != nil {
				t.Fatal(err)
			}
			if boxes, err := old.ListBoxes(ctx); err != nil || len(boxes) != 3 {
				t.Fatalf("list: %v %v", boxes, err)
			} else {
				for _, x := range boxes {
					if x.Name == "short-1" && x.Title != "renamed" {
						t.Errorf("after an update: title %q, want renamed", x.Title)
					}
				}
			}
			old.Close()
		})
	}
}
