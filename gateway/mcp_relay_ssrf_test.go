package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/config"
)

// TestRegressionMCPRelaySSRF: any user could register an MCP server at a
// loopback, private or metadata address, or at a name resolving to one, and
// call it from inside their box through http://10.0.2.100/mcp/NAME: the
// gateway host made the request. Now, from inside a real box: a server at
// a loopback address (a row registered before the check; registering one
// now is refused), one at a name resolving to loopback, and a trusted one
// that redirects to loopback are each refused — with the status the box
// sees and an audit line saying why — and none of them reaches the trap on
// loopback, while a trusted private upstream still answers.
func TestRegressionMCPRelaySSRF(t *testing.T) {
	var trapHits atomic.Int64
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trapHits.Add(1)
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"trapped":true}}`)
	}))
	defer trap.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"relayed":true}}`)
	}))
	defer good.Close()
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, trap.URL+"/stolen", http.StatusTemporaryRedirect)
	}))
	defer redir.Close()
	// The operator trusts the good server and the redirector (their ports),
	// not the trap.
	g := newBoxGatewayWith(t, nil, func(c *config.Config) {
		c.Net.PrivateUpstreams = append(c.Net.PrivateUpstreams, urlHostPort(t, good.URL), urlHostPort(t, redir.URL))
	})
	ctx := context.Background()
	trapPort := strings.TrimPrefix(urlHostPort(t, trap.URL), "127.0.0.1:")

	// Registering: a private address the operator does not trust is
	// refused, whatever the front (they all call the core).
	for _, raw := range []string{trap.URL + "/mcp", "http://169.254.169.254/latest/meta-data/", "http://localhost:" + trapPort + "/mcp"} {
		if _, err := g.f.AddMCPServer(ctx, g.alice, "bad", raw, nil); !errors.Is(err, fleet.ErrInvalid) || !strings.Contains(err.Error(), "public addresses only") {
			t.Errorf("registering %s: %v, want it refused", raw, err)
		}
	}
	// A row written before the check existed: sealed as the core seals.
	sealed, err := g.s.core.sealer.Seal([]byte(`{}`), []byte("mcp-server:alice:legacy"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.s.store.InsertMCPServer(ctx, fleet.MCPServerDoc{Owner: "alice", Name: "legacy", URL: trap.URL + "/mcp", Headers: sealed, Created: time.Now()},
		audit.Entry{Time: time.Now(), Actor: "alice", Front: "test", Action: "mcp.server.add", Target: "legacy", Result: audit.ResultOK}); err != nil {
		t.Fatal(err)
	}
	for name, raw := range map[string]string{
		"byname":   "http://loopback.test:" + trapPort + "/mcp", // a name: judged by its addresses at every call
		"redirect": redir.URL + "/mcp",
		"good":     good.URL + "/mcp",
	} {
		if _, err := g.f.AddMCPServer(ctx, g.alice, name, raw, nil); err != nil {
			t.Fatalf("registering %s: %v", raw, err)
		}
	}

	b, err := g.f.Delegate(ctx, g.alice, fleet.DelegateRequest{Agent: "script", Task: "!say ready"})
	if err != nil {
		t.Fatal(err)
	}
	g.waitState(b.Name, fleet.Done)
	for _, tc := range []struct {
		name   string
		status int
		audit  string // what the audit line says; "" for the permitted one
	}{
		{"legacy", 403, "upstream refused: 127.0.0.1 is a loopback address"},
		{"byname", 403, "upstream refused: 127.0.0.1 is a loopback address"},
		{"redirect", 502, "a redirect to " + trap.URL + "; the gateway follows no redirect"},
		{"good", 200, ""},
	} {
		out, code := g.sh(b.Name, `curl -sS --max-time 30 -w '\nstatus=%{http_code}' -X POST http://10.0.2.100/mcp/`+tc.name+
			` -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"ping"}'`)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("status=%d", tc.status)) {
			t.Errorf("/mcp/%s from the box: exit %d, %q; want status %d", tc.name, code, out, tc.status)
		}
		if tc.audit == "" {
			if !strings.Contains(out, `"relayed":true`) {
				t.Errorf("/mcp/%s: %q", tc.name, out)
			}
			continue
		}
		found := false
		for _, r := range g.auditRows("net.mcp") {
			if r.Result == audit.ResultDenied && strings.Contains(r.Detail, "box="+b.Name+" POST "+tc.name+" ") && strings.Contains(r.Detail, tc.audit) {
				found = true
			}
		}
		if !found {
			rows, _ := json.MarshalIndent(g.auditRows("net.mcp"), "", "  ")
			t.Errorf("/mcp/%s: no denied net.mcp audit line saying %q:\n%s", tc.name, tc.audit, rows)
		}
	}
	if n := trapHits.Load(); n != 0 {
		t.Errorf("the loopback trap was reached %d times through the relay", n)
	}
}
