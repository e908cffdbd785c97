-- Each user's default egress presets ("@npm @github", space-separated,
-- canonical: fleet/presets.go), added to the allow-list of every box they
-- delegate. No row: none.

CREATE TABLE user_presets (
	owner   TEXT    NOT NULL PRIMARY KEY,
	presets TEXT    NOT NULL,
	updated INTEGER NOT NULL
);
