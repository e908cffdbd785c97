package accounts_test

import (
	"database/sql"

	_ "modernc.org/sqlite"
)

// sqlOpen opens the database directly, as an attacker with write access to
// the file would.
func sqlOpen(path string) (*sql.DB, error) { return sql.Open("sqlite", "file:"+path) }
