package boxnet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// boxHeaders is the box's own HTTP client: it tries to send credentials of
// its own, which the relay must drop.
type boxHeaders struct{ rt http.RoundTripper }

func (b boxHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer box-made-up")
	return b.rt.RoundTrip(r)
}

// A real MCP client in the box reaches an operator-configured MCP server
// (real go-sdk Streamable HTTP server, SSE responses) through /mcp/NAME; the
// server's secret header is added by the gateway and the box's own dropped.
func TestMCPRelay(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo text"}, func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + a.Text}}}, nil, nil
	})
	var mu sync.Mutex
	var auths []string
	var sse bool
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer mcp-secret" || r.URL.Query().Get("tenant") != "acme" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(&sseSpy{ResponseWriter: w, seen: func() { mu.Lock(); sse = true; mu.Unlock() }}, r)
	}))
	t.Cleanup(up.Close)

	pol := newPolicy()
	pol.set("b", BoxPolicy{MCP: map[string]MCPRoute{
		"tools": {URL: mustURL(t, up.URL+"/mcp?tenant=acme"), Headers: map[string]string{"Authorization": "Bearer mcp-secret"}},
	}})
	s := newTestServer(Config{Policy: pol, PrivateUpstreams: trust(t, up.URL)})
	base := "http://" + serveBox(t, s, "b")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "box", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   base + "/mcp/tools",
		HTTPClient: &http.Client{Transport: boxHeaders{http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "echo: hi" {
		t.Fatalf("CallTool: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if !sse {
		t.Fatal("no SSE response went through: the streaming path is untested")
	}
	for _, a := range auths {
		if a != "Bearer mcp-secret" {
			t.Fatalf("upstream saw Authorization %q", a)
		}
	}

	// An MCP server not configured for the box is not found.
	resp, err := http.Post(base+"/mcp/other", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown server: %d", resp.StatusCode)
	}
	ds := pol.audited(KindMCP)
	if last := ds[len(ds)-1]; last.Verdict != Deny || !strings.Contains(last.Reason, "no MCP server other") {
		t.Fatalf("decision %+v", last)
	}
}

// sseSpy notes when the upstream answers with an event stream.
type sseSpy struct {
	http.ResponseWriter
	seen func()
}

func (s *sseSpy) WriteHeader(code int) {
	if strings.HasPrefix(s.Header().Get("Content-Type"), "text/event-stream") {
		s.seen()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sseSpy) Flush() { s.ResponseWriter.(http.Flusher).Flush() }
