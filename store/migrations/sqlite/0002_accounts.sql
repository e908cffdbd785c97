-- GitHub accounts per user. The token is sealed (fleet/seal, AES-256-GCM)
-- under a key that is not in this database; masked is its display form.

CREATE TABLE github_accounts (
	id         INTEGER PRIMARY KEY,
	user_id    INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	name       TEXT    NOT NULL,
	host       TEXT    NOT NULL, -- base URL the token was probed against and may be sent to
	masked     TEXT    NOT NULL,
	token      BLOB    NOT NULL, -- sealed, aad "github-account:<user_id>:<name>"
	is_default INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),
	created    INTEGER NOT NULL,
	UNIQUE (user_id, name)
);
-- At most one default per user.
CREATE UNIQUE INDEX github_accounts_default ON github_accounts (user_id) WHERE is_default = 1;
