-- Each user's notification channels and the outbox of their deliveries.
-- A channel's URL and secret are sealed together (fleet/seal, aad
-- "notify-channel:<owner>:<name>"); url_shown is what lists and audit rows
-- show (no path secrets, no query). A delivery is one event for one
-- channel: its key makes an event (or a day's digest) enqueue once however
-- many gateways notice it, and a restart resumes what is pending.

CREATE TABLE notify_channels (
	owner     TEXT    NOT NULL,
	name      TEXT    NOT NULL,
	kind      TEXT    NOT NULL,
	url_shown TEXT    NOT NULL,
	sealed    BLOB    NOT NULL,
	events    TEXT    NOT NULL,
	digest    INTEGER NOT NULL,
	enabled   INTEGER NOT NULL,
	created   INTEGER NOT NULL,
	PRIMARY KEY (owner, name)
);

CREATE TABLE notify_deliveries (
	id           INTEGER PRIMARY KEY,
	owner        TEXT    NOT NULL,
	channel      TEXT    NOT NULL,
	key          TEXT    NOT NULL,
	event        TEXT    NOT NULL,
	box          TEXT    NOT NULL,
	payload      TEXT    NOT NULL,
	status       TEXT    NOT NULL,
	attempts     INTEGER NOT NULL,
	next_attempt INTEGER NOT NULL,
	last_status  INTEGER NOT NULL,
	last_error   TEXT    NOT NULL,
	created      INTEGER NOT NULL,
	delivered    INTEGER NOT NULL,
	UNIQUE (owner, channel, key)
);
CREATE INDEX notify_deliveries_due ON notify_deliveries (status, next_attempt);
CREATE INDEX notify_deliveries_channel ON notify_deliveries (owner, channel, id);
