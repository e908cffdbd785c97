-- The web console (PostgreSQL dialect of 0004_web.sql): one-time login links,
-- the login sessions a user can list and revoke, and the scs session store.
-- Tokens are kept only as SHA-256.

CREATE TABLE login_links (
	hash    BYTEA  PRIMARY KEY, -- SHA-256 of the link's token
	user_id BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created BIGINT NOT NULL,
	expires BIGINT NOT NULL,
	used    BIGINT -- set once; a used link never works again
);
CREATE INDEX login_links_expires ON login_links (expires);

CREATE TABLE web_sessions (
	id        TEXT   PRIMARY KEY,
	user_id   BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	created   BIGINT NOT NULL,
	last_seen BIGINT NOT NULL,
	addr      TEXT   NOT NULL DEFAULT '',
	agent     TEXT   NOT NULL DEFAULT ''
);
CREATE INDEX web_sessions_user ON web_sessions (user_id);

CREATE TABLE scs_sessions (
	token  TEXT   PRIMARY KEY,
	data   BYTEA  NOT NULL,
	expiry BIGINT NOT NULL
);
CREATE INDEX scs_sessions_expiry ON scs_sessions (expiry);
