package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
	"net/url"
	"sort"
	"strings"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
)

// MCPServer is one of a user's MCP servers as fronts see it: the header
// names, never their values.
type MCPServer struct {
	Name    string   `json:"name"`
	URL     string   `json:"url"`
	Headers []string `json:"headers"`
}

// Limits of an MCP server entry.
const (
	maxMCPServers = 16
	maxMCPHeaders = 16
)

var (
	mcpNameFirst = charset.New("a-z")
	mcpNameRest  = charset.New("a-z0-9_-")
)

func mcpAAD(owner, name string) []byte { return []byte("mcp-server:" + owner + ":" + name) }

// AddMCPServer saves an MCP server (Streamable HTTP) the caller's boxes may
// reach through the gateway's relay at http://10.0.2.100/mcp/NAME. The
// headers (the server's secrets) are sealed at rest, added by the gateway on
// the way out, and never enter a box.
func (f *Fleet) AddMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string) (MCPServer, error) {
	if err := need(caller, keys.RightWrite, "add MCP server"); err != nil {
		return MCPServer{}, err
	}
	e := f.entry(caller, "mcp.server.add", name)
	s, err := f.addMCPServer(ctx, caller, name, rawURL, headers, &e)
	if err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return MCPServer{}, f.safeErr(err)
	}
	// Its header values are redacted everywhere from now on.
	if err := f.red.Refresh(ctx); err != nil {
		f.log.Warn("redactor refresh after MCP server add", "err", err)
	}
	return s, nil
}

func (f *Fleet) addMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string, e *audit.Entry) (MCPServer, error) {
	if f.mcp == nil || f.sealer == nil {
		return MCPServer{}, fmt.Errorf("this gateway keeps no MCP servers: %w", ErrUnavailable)
	}
	if !charset.Is(name, 1, 32, mcpNameFirst, mcpNameRest) {
		return MCPServer{}, fmt.Errorf("MCP server name %q: want 1-32 of a-z, 0-9, _ and -, starting with a letter: %w", name, ErrInvalid)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not quoted: a mistyped URL may hold a credential, and this
		// message reaches the audit log and the page.
		return MCPServer{}, fmt.Errorf("MCP server URL: not a URL; want http(s)://host/path: %w", ErrInvalid)
	}
	if u.User != nil {
		return MCPServer{}, fmt.Errorf("MCP server URL %q: credentials do not go in the URL; give them as a header (it is sealed): %w", shownURL(u), ErrInvalid)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return MCPServer{}, fmt.Errorf("MCP server URL %q: want http(s)://host/path: %w", shownURL(u), ErrInvalid)
	}
	if u.Fragment != "" {
		return MCPServer{}, fmt.Errorf("MCP server URL %q: a #fragment is never sent to a server; leave it out: %w", shownURL(u), ErrInvalid)
	}
	// The relay dials it from the gateway host: the box network's address
	// policy judges it here as far as it can without DNS (an address, a
	// loopback name) and again, by what it resolves to, on every call.
	if err := netpolicy.CheckUpstream(u, f.private); err != nil {
		return MCPServer{}, fmt.Errorf("MCP server URL %q: %v: the gateway relays to public addresses only (an operator may trust a private one with net.private_upstreams): %w", shownURL(u), err, ErrInvalid)
	}
	if len(headers) > maxMCPHeaders {
		return MCPServer{}, fmt.Errorf("%d headers (max %d): %w", len(headers), maxMCPHeaders, ErrInvalid)
	}
	clean := map[string]string{}
	for k, v := range headers {
		ck := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k))
		if ck == "" || strings.ContainsAny(ck, " \t\r\n:") || strings.ContainsAny(v, "\r\n\x00") || len(v) > 8<<10 {
			return MCPServer{}, fmt.Errorf("header %q: want a header name and a one-line value: %w", k, ErrInvalid)
		}
		clean[ck] = strings.TrimSpace(v)
	}
	existing, err := f.mcp.ListMCPServers(ctx, caller.User)
	if err != nil {
		return MCPServer{}, err
	}
	if len(existing) >= maxMCPServers {
		return MCPServer{}, fmt.Errorf("you have %d MCP servers (max %d): %w", len(existing), maxMCPServers, ErrLimit)
	}
	plain, err := json.Marshal(clean)
	if err != nil {
		return MCPServer{}, err
	}
	sealed, err := f.sealer.Seal(plain, mcpAAD(caller.User, name))
	if err != nil {
		return MCPServer{}, err
	}
	e.Detail = "url=" + shownURL(u) + " headers=" + strings.Join(sortedKeys(clean), ",")
	if err := f.mcp.InsertMCPServer(ctx, MCPServerDoc{Owner: caller.User, Name: name, URL: u.String(), Headers: sealed, Created: f.now()}, *e); err != nil {
		return MCPServer{}, err
	}
	f.audit.Finish(ctx, *e, nil, "")
	return MCPServer{Name: name, URL: u.String(), Headers: sortedKeys(clean)}, nil
}

// shownURL is an MCP server URL as errors and audit rows quote it: scheme,
// host and path. Its user info, query and fragment may hold a credential
// the redactor does not know (the headers are the place for those).
func shownURL(u *url.URL) string {
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		v.User = url.User("…")
	}
	out := v.String()
	if u.RawQuery != "" {
		out += "?…"
	}
	if u.Fragment != "" {
		out += "#…"
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// MCPServers lists the caller's MCP servers (header names only).
func (f *Fleet) MCPServers(ctx context.Context, caller keys.Actor) ([]MCPServer, error) {
	if err := need(caller, keys.RightRead, "list MCP servers"); err != nil {
		return nil, err
	}
	docs, err := f.mcpServers(ctx, caller.User)
	if err != nil {
		return nil, f.safeErr(err)
	}
	out := []MCPServer{}
	for _, d := range docs {
		out = append(out, MCPServer{Name: d.name, URL: d.url, Headers: sortedKeys(d.headers)})
	}
	return out, nil
}

// RemoveMCPServer deletes one of the caller's MCP servers.
func (f *Fleet) RemoveMCPServer(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "remove MCP server"); err != nil {
		return err
	}
	if f.mcp == nil {
		return f.safeErr(fmt.Errorf("this gateway keeps no MCP servers: %w", ErrUnavailable))
	}
	e := f.entry(caller, "mcp.server.rm", name)
	found, err := f.mcp.DeleteMCPServer(ctx, caller.User, name, e)
	if err == nil && !found {
		// Another user's server answers the same: it is not theirs to see.
		err = fmt.Errorf("MCP server %q: %w", name, ErrNotFound)
	}
	if err != nil {
		// A refused removal is on record too (probing for names shows).
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	return nil
}

type mcpServer struct {
	name, url string
	headers   map[string]string
}

// mcpServers opens owner's MCP servers.
func (f *Fleet) mcpServers(ctx context.Context, owner string) ([]mcpServer, error) {
	if f.mcp == nil || f.sealer == nil {
		return nil, nil
	}
	docs, err := f.mcp.ListMCPServers(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []mcpServer
	for _, d := range docs {
		plain, err := f.sealer.Open(d.Headers, mcpAAD(d.Owner, d.Name))
		if err != nil {
			return nil, fmt.Errorf("open MCP server %q of %q: %w", d.Name, d.Owner, err)
		}
		var h map[string]string
		if err := json.Unmarshal(plain, &h); err != nil {
			return nil, fmt.Errorf("MCP server %q of %q: %w", d.Name, d.Owner, err)
		}
		out = append(out, mcpServer{name: d.Name, url: d.URL, headers: h})
	}
	return out, nil
}

// MCPSecrets returns every MCP header value owner's servers hold, for the
// redactor's list of known secrets (and for nothing else).
func (f *Fleet) MCPSecrets(ctx context.Context, owner string) ([]string, error) {
	srvs, err := f.mcpServers(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range srvs {
		for _, v := range s.headers {
			out = append(out, v)
			// "Bearer xyz": the credential alone too.
			if _, cred, ok := strings.Cut(v, " "); ok {
				out = append(out, cred)
			}
		}
	}
	return out, nil
}

// mcpConfigPath is the agent's MCP configuration in the guest.
const mcpConfigPath = "/var/lib/sbx/mcp.json"

// mcpConfig is the agent's --mcp-config: every server of the owner through
// the gateway's relay (the box sees only that URL), and the tool names to
// allow.
func (f *Fleet) mcpConfig(ctx context.Context, owner string) ([]byte, []string, error) {
	srvs, err := f.mcpServers(ctx, owner)
	if err != nil || len(srvs) == 0 || f.net == nil {
		return nil, nil, err
	}
	cfg := map[string]any{}
	var tools []string
	for _, s := range srvs {
		cfg[s.name] = map[string]string{"type": "http", "url": "http://" + GatewayHost + "/mcp/" + s.name}
		tools = append(tools, "mcp__"+s.name)
	}
	b, err := json.Marshal(map[string]any{"mcpServers": cfg})
	return b, tools, err
}

// Sealer seals secrets at rest; *seal.Sealer implements it.
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
	Open(sealed, aad []byte) ([]byte, error)
}

// withMCP gives the claude agent the owner's MCP servers through the relay:
// it writes the config into the guest and allows the servers' tools.
func (f *Fleet) withMCP(ctx context.Context, rec record, argv []string) ([]string, error) {
	cfg, tools, err := f.mcpConfig(ctx, rec.Owner)
	if err != nil || cfg == nil {
		return argv, err
	}
	if _, err := f.runStdin(ctx, rec.VM, []string{"/bin/sh", "-c", "mkdir -p /var/lib/sbx && cat > " + mcpConfigPath}, cfg); err != nil {
		return nil, fmt.Errorf("write the MCP config: %w", err)
	}
	out := append([]string{}, argv...)
	for i := range out {
		if out[i] == "--allowedTools" && i+1 < len(out) {
			out[i+1] += " " + strings.Join(tools, " ")
		}
	}
	return append(out, "--mcp-config", mcpConfigPath), nil
}
