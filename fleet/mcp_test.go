package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/seal"
)

// mcpEnv is an env whose core keeps MCP servers (the store and the sealer
// the gateway gives it).
func mcpEnv(t *testing.T) *env {
	e := newEnv(t, fleet.Policy{})
	sealer, err := seal.Load(e.data, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	e.fleet.Close()
	e.cfg.MCP, e.cfg.Sealer = e.store, sealer
	e.start()
	return e
}

// TestMCPServerURLCredentialNotEchoedRegression: a refused URL used to be
// quoted whole in the error, which reaches the web page, the SSH client
// and the audit row, so a credential typed into it was shown and stored.
func TestMCPServerURLCredentialNotEchoedRegression(t *testing.T) {
	e := mcpEnv(t)
	const secret = "s3cr3t-pass-9f1c"
	for _, raw := range []string{
		"https://bob:" + secret + "@mcp.example.com/mcp", // credentials
		"ftp://bob:" + secret + "@mcp.example.com/mcp",   // and a bad scheme
		"https://mcp.example.com/mcp#" + secret,          // a fragment
		"https://bob:" + secret + "@[::1/mcp",            // unparsable
		"http://" + secret + "%zz/",                      // unparsable
	} {
		_, err := e.fleet.AddMCPServer(e.ctx(), e.alice, "docs", raw, map[string]string{"Authorization": "Bearer x"})
		if !errors.Is(err, fleet.ErrInvalid) {
			t.Fatalf("%q: %v, want ErrInvalid", raw, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the error quotes the credential: %v", raw, err)
		}
	}
	rows, err := e.store.ListAudit(context.Background(), audit.Filter{User: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.Action != "mcp.server.add" {
			continue
		}
		n++
		if strings.Contains(r.Detail, secret) || r.Result != audit.ResultError {
			t.Errorf("audit row %+v", r)
		}
	}
	if n != 5 {
		t.Errorf("%d mcp.server.add rows, want 5 (every refusal)", n)
	}
	// An accepted URL's query may carry a key too: the audit row shows
	// scheme, host and path only.
	if _, err := e.fleet.AddMCPServer(e.ctx(), e.alice, "docs", "https://mcp.example.com/mcp?key="+secret, nil); err != nil {
		t.Fatal(err)
	}
	rows, _ = e.store.ListAudit(context.Background(), audit.Filter{User: "alice", Limit: 1})
	if len(rows) != 1 || rows[0].Result != audit.ResultOK || strings.Contains(rows[0].Detail, secret) || !strings.Contains(rows[0].Detail, "https://mcp.example.com/mcp?…") {
		t.Errorf("audit row of the accepted add: %+v", rows)
	}
}

// TestMCPServerRemoveRefusedIsAuditedRegression: removing a missing (or
// another user's) MCP server wrote no audit row, so probing for names left
// no trace. Now both answer alike and both are on record.
func TestMCPServerRemoveRefusedIsAuditedRegression(t *testing.T) {
	e := mcpEnv(t)
	if _, err := e.fleet.AddMCPServer(e.ctx(), e.alice, "docs", "https://mcp.example.com/mcp", map[string]string{"Authorization": "Bearer x"}); err != nil {
		t.Fatal(err)
	}
	errOther := e.fleet.RemoveMCPServer(e.ctx(), e.bob, "docs")
	errMissing := e.fleet.RemoveMCPServer(e.ctx(), e.bob, "nothing")
	if !errors.Is(errOther, fleet.ErrNotFound) || !errors.Is(errMissing, fleet.ErrNotFound) {
		t.Fatalf("bob removing alice's server: %v; a missing one: %v (want not found for both)", errOther, errMissing)
	}
	if strings.Replace(errOther.Error(), "docs", "X", 1) != strings.Replace(errMissing.Error(), "nothing", "X", 1) {
		t.Errorf("another user's server and a missing one answer differently: %q vs %q", errOther, errMissing)
	}
	rows, err := e.store.ListAudit(context.Background(), audit.Filter{User: "bob", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rows {
		if r.Action == "mcp.server.rm" {
			got[r.Target] = r.Result
		}
	}
	if got["docs"] != audit.ResultError || got["nothing"] != audit.ResultError {
		t.Errorf("audit rows of bob's refused removals: %v", got)
	}
	if err := e.fleet.RemoveMCPServer(e.ctx(), e.alice, "docs"); err != nil {
		t.Fatal(err)
	}
}
