package store

import (
	"context"
	"encoding/json"
	"fmt"

	"sbx.dev/sbx/fleet"
)

// migrationSteps are the Go steps of migrations whose rows a rule of the
// core computes, by migration file name (the same in both dialects).
func migrationSteps() map[string]func(context.Context, conn) error {
	return map[string]func(context.Context, conn) error{
		"0009_box_titles.sql": backfillTitles,
	}
}

// backfillTitles gives every box without a title the one its task makes
// (fleet.DefaultTitle). A document that does not parse keeps no title: the
// core derives it when it reads the box, as for any row without one.
func backfillTitles(ctx context.Context, tx conn) error {
	rows, err := tx.query(ctx, "SELECT name, doc FROM boxes WHERE title = ''")
	if err != nil {
		return fmt.Errorf("boxes without a title: %w", err)
	}
	titles := map[string]string{}
	for rows.Next() {
		var name, doc string
		if err := rows.Scan(&name, &doc); err != nil {
			rows.Close()
			return fmt.Errorf("boxes without a title: %w", err)
		}
		var d struct {
			Task string `json:"task"`
		}
		if json.Unmarshal([]byte(doc), &d) == nil {
			if t := fleet.DefaultTitle(d.Task); t != "" {
				titles[name] = t
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("boxes without a title: %w", err)
	}
	for name, t := range titles {
		if _, err := tx.exec(ctx, "UPDATE boxes SET title = ? WHERE name = ?", t, name); err != nil {
			return fmt.Errorf("title of box %q: %w", name, err)
		}
	}
	return nil
}
