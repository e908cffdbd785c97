-- Users, their SSH keys and API keys, and the audit log.
-- Times are Unix nanoseconds (UTC); NULL means "never".

CREATE TABLE users (
	id       INTEGER PRIMARY KEY,
	name     TEXT    NOT NULL UNIQUE,
	role     TEXT    NOT NULL CHECK (role IN ('admin', 'operator')),
	disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1)),
	created  INTEGER NOT NULL
);

CREATE TABLE ssh_keys (
	id          INTEGER PRIMARY KEY,
	user_id     INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	fingerprint TEXT    NOT NULL UNIQUE,
	type        TEXT    NOT NULL,
	public_key  TEXT    NOT NULL, -- authorized_keys form, without comment
	comment     TEXT    NOT NULL DEFAULT '',
	created     INTEGER NOT NULL
);
CREATE INDEX ssh_keys_user ON ssh_keys (user_id);

CREATE TABLE api_keys (
	id        TEXT    PRIMARY KEY,
	user_id   INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,
	name      TEXT    NOT NULL,
	hash      BLOB    NOT NULL, -- SHA-256 of the whole token
	scopes    TEXT    NOT NULL DEFAULT '', -- space separated
	created   INTEGER NOT NULL,
	expires   INTEGER,
	revoked   INTEGER,
	last_used INTEGER
);
CREATE INDEX api_keys_user ON api_keys (user_id);

CREATE TABLE audit (
	id     INTEGER PRIMARY KEY,
	time   INTEGER NOT NULL,
	actor  TEXT    NOT NULL,
	front  TEXT    NOT NULL,
	action TEXT    NOT NULL,
	target TEXT    NOT NULL,
	addr   TEXT    NOT NULL,
	result TEXT    NOT NULL,
	detail TEXT    NOT NULL
);
CREATE INDEX audit_time ON audit (time);
CREATE INDEX audit_actor_time ON audit (actor, time);
