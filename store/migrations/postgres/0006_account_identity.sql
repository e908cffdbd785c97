-- Who each GitHub account's token belongs to, as the host's API answered
-- when the account was added (PostgreSQL dialect of
-- 0006_account_identity.sql). Accounts added before this migration have
-- login '' (never checked).

ALTER TABLE github_accounts ADD COLUMN login TEXT NOT NULL DEFAULT '';
-- A classic token's OAuth scopes, space-separated; NULL when the host
-- reported none (a fine-grained or app token, or never checked).
ALTER TABLE github_accounts ADD COLUMN scopes TEXT;
-- Unix nanoseconds; NULL when the token does not expire (or the host did
-- not say).
ALTER TABLE github_accounts ADD COLUMN expires BIGINT;
