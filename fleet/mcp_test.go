package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/netpolicy"
)

// mcpEnv is an env whose core keeps MCP servers: the harness gives it the
// store and the sealer as the gateway does.
func mcpEnv(t *testing.T) *env { return newEnv(t, fleet.Policy{}) }

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

// TestRegressionMCPRegisterPrivateURL: any user could register an MCP
// server at a loopback, private or cloud-metadata address, which the
// gateway's relay then called from the gateway host on their box's behalf.
// The core refuses such a URL from every front (ErrInvalid, saying why and
// what the operator can do), audits the refusal, and accepts a private
// address only when the operator trusts it (net.private_upstreams).
func TestRegressionMCPRegisterPrivateURL(t *testing.T) {
	e := mcpEnv(t)
	e.fleet.Close()
	trusted, err := netpolicy.ParseTrusts([]string{"10.20.0.0/16", "127.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.PrivateUpstreams = trusted
	e.start()
	for raw, why := range map[string]string{
		"http://127.0.0.1:9000/mcp":               "127.0.0.1 is a loopback address",
		"http://127.0.0.1/mcp":                    "127.0.0.1 is a loopback address", // trusted on 8080 only
		"http://169.254.169.254/latest/meta-data": "169.254.169.254 is a cloud metadata address",
		"http://10.0.0.5/mcp":                     "10.0.0.5 is a private address (RFC 1918)",
		"https://192.168.1.10/mcp":                "RFC 1918",
		"http://[::1]:8080/mcp":                   "reserved IPv6",
		"http://[::ffff:169.254.169.254]/":        "cloud metadata",
		"http://[fd00:ec2::254]/":                 "unique local",
		"http://100.100.100.200/":                 "CGNAT",
		"http://0.0.0.0:8080/":                    "this-network",
		"http://localhost:8080/mcp":               "localhost is a loopback name",
		"http://2130706433/":                      "not a DNS name or an IP address",
	} {
		_, err := e.fleet.AddMCPServer(e.ctx(), e.alice, "tools", raw, map[string]string{"Authorization": "Bearer x"})
		if !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "public addresses only") {
			t.Errorf("%s: %v, want ErrInvalid saying %q", raw, err, why)
		}
	}
	if list, err := e.fleet.MCPServers(e.ctx(), e.alice); err != nil || len(list) != 0 {
		t.Fatalf("servers after refusals: %v %v", list, err)
	}
	rows, err := e.store.ListAudit(context.Background(), audit.Filter{User: "alice", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.Action == "mcp.server.add" && r.Result == audit.ResultError && strings.Contains(r.Detail, "public addresses only") {
			n++
		}
	}
	if n != 12 {
		t.Errorf("%d refused mcp.server.add rows, want 12", n)
	}
	// Trusted by the operator, a public name, a public address: accepted.
	for i, raw := range []string{"http://10.20.1.2/mcp", "http://127.0.0.1:8080/mcp", "https://mcp.example.com/mcp", "https://93.184.215.14/mcp"} {
		if _, err := e.fleet.AddMCPServer(e.ctx(), e.alice, fmt.Sprintf("ok%d", i), raw, nil); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
}
