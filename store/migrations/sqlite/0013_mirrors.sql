-- Internal package mirrors: an admin's named exception to the box network's
-- address policy (internal/netpolicy/mirror.go). host is "HOST[:PORT]"
-- (canonical), ranges space-separated canonical prefixes.

CREATE TABLE net_mirrors (
	name    TEXT    NOT NULL PRIMARY KEY,
	host    TEXT    NOT NULL,
	ranges  TEXT    NOT NULL,
	added_by TEXT    NOT NULL,
	created INTEGER NOT NULL
);
