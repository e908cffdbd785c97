-- MCP servers each user's boxes may reach through the gateway's MCP relay.
-- The headers (their secrets) are sealed like GitHub tokens (fleet/seal,
-- aad "mcp-server:<owner>:<name>"); boxes only ever see the relay URL.

CREATE TABLE mcp_servers (
	owner   TEXT    NOT NULL,
	name    TEXT    NOT NULL,
	url     TEXT    NOT NULL,
	headers BLOB    NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (owner, name)
);
