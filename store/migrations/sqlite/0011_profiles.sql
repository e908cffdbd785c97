-- Project profiles (fleet/profiles.go): named delegation settings, a
-- user's own (scope 'user', owner the user) or shared by an admin (scope
-- 'site', owner ''). body is the fleet.Profile as JSON.

CREATE TABLE profiles (
	scope   TEXT   NOT NULL,
	owner   TEXT   NOT NULL,
	name    TEXT   NOT NULL,
	body    TEXT   NOT NULL,
	updated INTEGER NOT NULL,
	PRIMARY KEY (scope, owner, name)
);

-- Each user's default profile per repository ("owner/name"), by name: the
-- user's own of that name, else the site's.
CREATE TABLE repo_profiles (
	owner   TEXT   NOT NULL,
	repo    TEXT   NOT NULL,
	profile TEXT   NOT NULL,
	updated INTEGER NOT NULL,
	PRIMARY KEY (owner, repo)
);
