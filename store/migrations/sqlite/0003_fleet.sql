-- The fleet core's boxes and their queued follow-ups. A box is one JSON
-- document (fleet's record type, so a new field needs no migration) with the
-- columns the core filters on.

CREATE TABLE boxes (
	name    TEXT    PRIMARY KEY,
	owner   TEXT    NOT NULL,
	state   TEXT    NOT NULL,
	doc     TEXT    NOT NULL,
	created INTEGER NOT NULL,
	updated INTEGER NOT NULL
);
CREATE INDEX boxes_owner ON boxes (owner);

CREATE TABLE box_inbox (
	id   INTEGER PRIMARY KEY,
	box  TEXT    NOT NULL REFERENCES boxes (name) ON DELETE CASCADE,
	by   TEXT    NOT NULL,
	text TEXT    NOT NULL,
	at   INTEGER NOT NULL
);
CREATE INDEX box_inbox_box ON box_inbox (box, id);
