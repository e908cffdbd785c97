-- The pull requests a box's branches became (PostgreSQL dialect of
-- 0008_box_prs.sql): one row per pull request, what the forge last said of
-- it. A box's rows go with the box.

CREATE TABLE box_prs (
	box      TEXT    NOT NULL REFERENCES boxes (name) ON DELETE CASCADE,
	owner    TEXT    NOT NULL,
	repo     TEXT    NOT NULL, -- owner/name on the git host
	number   BIGINT  NOT NULL,
	account  TEXT    NOT NULL, -- the owner's account whose token acts on it
	url      TEXT    NOT NULL,
	base     TEXT    NOT NULL,
	head     TEXT    NOT NULL, -- the box's branch
	head_sha TEXT    NOT NULL, -- the last head seen (a merge passes it)
	state    TEXT    NOT NULL, -- open, closed, merged
	checks   TEXT    NOT NULL, -- the checks' outcome: '', pending, success, failure
	card     TEXT    NOT NULL, -- the last card (forge.PullRequest as JSON)
	updated  BIGINT  NOT NULL,
	PRIMARY KEY (box, repo, number)
);
CREATE INDEX box_prs_state ON box_prs (state);
