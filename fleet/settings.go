package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/internal/charset"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
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

// settings are each user's own: GitHub accounts, MCP servers, and the
// egress allow-lists their boxes get. Its errors are already redacted.
type settings struct {
	accounts *accounts.Service
	mcp      MCPStore // nil: no MCP servers
	sealer   Sealer
	private  []netpolicy.Trust
	net      Network
	vm       Machines
	red      *redact.Redactor
	audit    *audit.Log
	now      func() time.Time
	log      *slog.Logger
}

// addMCPServer saves an MCP server (see Fleet.AddMCPServer).
func (s *settings) addMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string) (MCPServer, error) {
	e := caller.Entry(s.now(), "mcp.server.add", name)
	srv, err := s.saveMCPServer(ctx, caller, name, rawURL, headers, &e)
	if err != nil {
		s.audit.Finish(ctx, e, err, audit.ResultError)
		return MCPServer{}, s.red.Error(err)
	}
	// Its header values are redacted everywhere from now on.
	if err := s.red.Refresh(ctx); err != nil {
		s.log.Warn("redactor refresh after MCP server add", "err", err)
	}
	return srv, nil
}

func (s *settings) saveMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string, e *audit.Entry) (MCPServer, error) {
	if s.mcp == nil || s.sealer == nil {
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
	if err := netpolicy.CheckUpstream(u, s.private); err != nil {
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
	existing, err := s.mcp.ListMCPServers(ctx, caller.User)
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
	sealed, err := s.sealer.Seal(plain, mcpAAD(caller.User, name))
	if err != nil {
		return MCPServer{}, err
	}
	e.Detail = "url=" + shownURL(u) + " headers=" + strings.Join(sortedKeys(clean), ",")
	if err := s.mcp.InsertMCPServer(ctx, MCPServerDoc{Owner: caller.User, Name: name, URL: u.String(), Headers: sealed, Created: s.now()}, *e); err != nil {
		return MCPServer{}, err
	}
	s.audit.Finish(ctx, *e, nil, "")
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

// sortedKeys lists m's keys in order, never nil: an MCP server without
// headers shows "headers": [] in JSON, not null (slices.Sorted(maps.Keys(m))
// is nil for an empty map).
func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// listMCPServers lists the caller's MCP servers (header names only).
func (s *settings) listMCPServers(ctx context.Context, caller keys.Actor) ([]MCPServer, error) {
	docs, err := s.mcpServers(ctx, caller.User)
	if err != nil {
		return nil, s.red.Error(err)
	}
	out := []MCPServer{}
	for _, d := range docs {
		out = append(out, MCPServer{Name: d.name, URL: d.url, Headers: sortedKeys(d.headers)})
	}
	return out, nil
}

// removeMCPServer deletes one of the caller's MCP servers.
func (s *settings) removeMCPServer(ctx context.Context, caller keys.Actor, name string) error {
	if s.mcp == nil {
		return s.red.Error(fmt.Errorf("this gateway keeps no MCP servers: %w", ErrUnavailable))
	}
	e := caller.Entry(s.now(), "mcp.server.rm", name)
	found, err := s.mcp.DeleteMCPServer(ctx, caller.User, name, e)
	if err == nil && !found {
		// Another user's server answers the same: it is not theirs to see.
		err = fmt.Errorf("MCP server %q: %w", name, ErrNotFound)
	}
	if err != nil {
		// A refused removal is on record too (probing for names shows).
		s.audit.Finish(ctx, e, err, audit.ResultError)
		return s.red.Error(err)
	}
	s.audit.Finish(ctx, e, nil, "")
	return nil
}

type mcpServer struct {
	name, url string
	headers   map[string]string
}

// mcpServers opens owner's MCP servers.
func (s *settings) mcpServers(ctx context.Context, owner string) ([]mcpServer, error) {
	if s.mcp == nil || s.sealer == nil {
		return nil, nil
	}
	docs, err := s.mcp.ListMCPServers(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []mcpServer
	for _, d := range docs {
		plain, err := s.sealer.Open(d.Headers, mcpAAD(d.Owner, d.Name))
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

// mcpSecrets returns every MCP header value owner's servers hold.
func (s *settings) mcpSecrets(ctx context.Context, owner string) ([]string, error) {
	srvs, err := s.mcpServers(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, srv := range srvs {
		for _, v := range srv.headers {
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
func (s *settings) mcpConfig(ctx context.Context, owner string) ([]byte, []string, error) {
	srvs, err := s.mcpServers(ctx, owner)
	if err != nil || len(srvs) == 0 || s.net == nil {
		return nil, nil, err
	}
	cfg := map[string]any{}
	var tools []string
	for _, srv := range srvs {
		cfg[srv.name] = map[string]string{"type": "http", "url": "http://" + GatewayHost + "/mcp/" + srv.name}
		tools = append(tools, "mcp__"+srv.name)
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
func (s *settings) withMCP(ctx context.Context, rec record, argv []string) ([]string, error) {
	cfg, tools, err := s.mcpConfig(ctx, rec.Owner)
	if err != nil || cfg == nil {
		return argv, err
	}
	if _, err := runStdin(ctx, s.vm, rec.VM, []string{"/bin/sh", "-c", "mkdir -p /var/lib/sbx && cat > " + mcpConfigPath}, cfg); err != nil {
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

// addAccount probes token and saves it sealed as one of the caller's
// GitHub accounts (see Fleet.AddAccount).
func (s *settings) addAccount(ctx context.Context, caller keys.Actor, name, token, probeRepo string) (accounts.Account, error) {
	var probe accounts.Repo
	if probeRepo != "" {
		r, err := s.accounts.ResolveRepo(probeRepo)
		if err != nil {
			return accounts.Account{}, s.red.Error(fmt.Errorf("%w: %w", ErrInvalid, err))
		}
		probe = r
	}
	a, err := s.accounts.Add(ctx, caller, caller.User, name, token, probe)
	if err != nil {
		return accounts.Account{}, s.red.Error(err)
	}
	// The new token is redacted everywhere from now on.
	if err := s.red.Refresh(ctx); err != nil {
		s.log.Warn("redactor refresh after account add", "err", err)
	}
	return a, nil
}

func (s *settings) removeAccount(ctx context.Context, caller keys.Actor, name string) error {
	return s.red.Error(s.accounts.Remove(ctx, caller, caller.User, name))
}

// cleanAllow checks an egress allow-list and puts its entries in canonical
// form: the box network's one parser of entries (netpolicy.ParseEntry), the
// one its proxy matches with. An entry is a host name, *.suffix or an IP
// address, with :PORT for a port other than 80 and 443, or a preset
// reference (@npm: presets.go), kept as the reference.
func cleanAllow(domains []string) ([]string, error) {
	if len(domains) > maxAllow {
		return nil, fmt.Errorf("%d allowed domains (max %d): %w", len(domains), maxAllow, ErrInvalid)
	}
	out := []string{}
	seen := map[string]bool{}
	for _, d := range domains {
		if netpolicy.IsPresetRef(d) {
			ref, err := cleanPresetRef(d)
			if err != nil {
				return nil, err
			}
			if !seen[ref] {
				seen[ref] = true
				out = append(out, ref)
			}
			continue
		}
		e, err := netpolicy.ParseEntry(d)
		if err != nil {
			return nil, fmt.Errorf("allowed domain %q: %v (e.g. example.com, *.example.com, example.com:8443, or a preset like @npm): %w", d, err, ErrInvalid)
		}
		if c := e.String(); !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}
