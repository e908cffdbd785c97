-- The web console: one-time login links, the login sessions a user can list
-- and revoke, and the scs session store. Tokens are kept only as SHA-256, so
-- a copy of the database opens no browser session.

CREATE TABLE login_links (
	hash    BLOB    PRIMARY KEY, -- SHA-256 of the link's token
	user_id INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created INTEGER NOT NULL,
	expires INTEGER NOT NULL,
	used    INTEGER -- set once; a used link never works again
);
CREATE INDEX login_links_expires ON login_links (expires);

-- One row per login; the browser's scs session names it. Revoking deletes
-- the row, and every request checks it, so the session ends everywhere at once.
CREATE TABLE web_sessions (
	id        TEXT    PRIMARY KEY,
	user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created   INTEGER NOT NULL,
	last_seen INTEGER NOT NULL,
	addr      TEXT    NOT NULL DEFAULT '',
	agent     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX web_sessions_user ON web_sessions (user_id);

-- alexedwards/scs data, keyed by the SHA-256 of the cookie token.
CREATE TABLE scs_sessions (
	token  TEXT    PRIMARY KEY,
	data   BLOB    NOT NULL,
	expiry INTEGER NOT NULL
);
CREATE INDEX scs_sessions_expiry ON scs_sessions (expiry);
