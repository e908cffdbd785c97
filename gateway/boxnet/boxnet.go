// Package boxnet serves a box's only network path. Each box reaches exactly one
// address, 10.0.2.100:80 (QEMU restrict=on with one guestfwd), and every TCP
// connection it opens there arrives on a per-box listener the gateway owns, so
// the listener names the calling box: nothing the box sends can claim another
// box's identity.
//
// One HTTP server per box (one shared handler) offers:
//
//   - an egress proxy (HTTP CONNECT and absolute-form plain HTTP), default deny
//     with a per-box domain allow-list or an open mode, to ports 80 and 443
//     unless an entry names another; private, loopback, link-local, CGNAT,
//     metadata, multicast and reserved addresses (and their IPv6 forms) are
//     refused after resolution even when open, and the proxy dials the exact
//     address it checked (no DNS rebinding);
//   - /git/BOX/REPO(.git)/…: smart HTTP to the real remote with the account
//     token added, for delegated repositories only, pushes only to the
//     delegated branches (the ref updates are parsed before anything is
//     forwarded);
//   - /model/…: the Messages API with the box's API key added and a per-box
//     request and token budget, the usage counted from the streamed response;
//   - /mcp/NAME/…: operator-configured MCP servers with their secret headers.
//
// The box never holds a token, an API key or an MCP secret. The data comes from
// the core through Policy; every decision is reported to Policy.Audit (egress:
// each CONNECT or plain request; git, model, MCP: each request, and a refused
// upstream redirect).
//
// The git, model and MCP upstreams are dialed under the egress proxy's
// address policy (package netpolicy), the one every connection the gateway
// makes on a box's behalf obeys: the upstream's name is resolved once per
// request, every answer checked, the checked address dialed; a forbidden
// address is refused unless the operator trusts it (Config.PrivateUpstreams,
// the configuration key net.private_upstreams). The gateway never follows an
// upstream's redirect: a 3xx (but 304) is refused with 502 and audited, so a
// redirect cannot lead it to an address it would not dial.
//
// # The box side
//
// What a box is given, and all it needs:
//
//	HTTPS_PROXY=http://10.0.2.100:80  HTTP_PROXY=http://10.0.2.100:80
//	NO_PROXY=10.0.2.100               (optional: proxied gateway URLs are served locally too)
//	ANTHROPIC_BASE_URL=http://10.0.2.100/model  ANTHROPIC_API_KEY=<any placeholder>
//	CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1  (else Claude Code also CONNECTs to api.anthropic.com)
//	git remote: http://10.0.2.100/git/BOX/OWNER/NAME.git
//	MCP server: http://10.0.2.100/mcp/NAME
//
// There is no DNS: clients resolve through the proxy (CONNECT host:port).
//
// # Decisions
//
// Egress: a name not on the allow-list is refused before any lookup, so the
// gateway's resolver is no side channel, and so is a port the list does not
// open (an entry opens 80 and 443, or the one port it names:
// "example.com:8443"). An allowed name is resolved once; if any answer is a
// forbidden address the request is refused (a name mixing public and private
// answers is suspect), else the proxy dials the checked addresses, never the
// name. "*.example.com" matches names strictly below example.com, not
// example.com itself. Numeric spellings of IPv4 (127.1, 0x7f.1, 2130706433)
// are refused as names.
//
// Git: BOX in the path must be the calling box and REPO delegated to it,
// else 404 (nothing reaches the remote). A push's ref updates are parsed
// before anything is forwarded; if any ref is outside the delegated branches
// the whole push is refused with a receive-pack result git prints as
// "remote: sbx: …" and "! [remote rejected] … (reason)". Signed pushes are
// refused. Only smart HTTP is served (no dumb HTTP, no LFS).
//
// Model: POST /v1/messages and /v1/messages/count_tokens, GET /v1/models[/ID];
// other paths get 403 (the key reaches the whole organization), except Claude
// Code's start-up probe HEAD /api/hello, which the gateway answers itself. Over the
// request or token budget: 429 with the API's rate_limit_error JSON, without
// reaching the upstream. Tokens are counted from the response as it streams
// by (JSON usage; SSE message_start and message_delta, whose counts are
// cumulative) and reported with Policy.Spend when the body ends.
package boxnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/internal/netpolicy"
)

// Policy is what boxnet needs from the core.
type Policy interface {
	// Box returns the current policy of a box. It is called once per request,
	// so a changed allow-list or budget applies to the next request.
	Box(ctx context.Context, box string) (BoxPolicy, error)
	// Audit records one decision. It must not block for long: it runs on the
	// request path.
	Audit(ctx context.Context, d Decision)
	// Spend adds usage to the box's model budget. boxnet calls it with
	// Requests: 1 before forwarding a model request (an error refuses the
	// request, so the core can enforce the budget atomically) and with the
	// counted tokens once the response has ended.
	Spend(ctx context.Context, box string, u Usage) error
}

// BoxPolicy is one box's network policy.
type BoxPolicy struct {
	// AllowDomains are the egress destinations (netpolicy.ParseEntry):
	// "example.com" matches that name only; "*.example.com" matches every
	// name below example.com but not example.com itself (list both for
	// both). An IP literal matches itself. An entry opens ports 80 and 443,
	// or with ":PORT" ("example.com:8443") that port only.
	AllowDomains []string
	// Open allows every destination name on ports 80 and 443 (and the ports
	// AllowDomains entries open for their names); forbidden addresses stay
	// refused.
	Open bool
	// Repos are the delegated repositories by the path the box uses after
	// /git/BOX/ without ".git", e.g. "acme/widget".
	Repos map[string]GitRoute
	// Model is the model endpoint; nil refuses /model/.
	Model *ModelRoute
	// MCP are the MCP servers by name (/mcp/NAME).
	MCP map[string]MCPRoute
	// Mirrors are the admins' internal package mirrors
	// (netpolicy.Mirror): a name AllowDomains grants may resolve into a
	// forbidden range when a mirror for that name and port declares it.
	// They open nothing by themselves.
	Mirrors []netpolicy.Mirror
}

// GitRoute is one delegated repository.
type GitRoute struct {
	// Upstream is the real repository URL, e.g.
	// https://github.com/acme/widget.git.
	Upstream *url.URL
	// Token is sent as HTTP basic x-access-token:Token.
	Token string
	// PushBranches are the branches the box may push to: a name
	// ("sbx/box1") or a prefix ending in "/*" ("sbx/box1/*"). Empty refuses
	// every push.
	PushBranches []string
}

// ModelRoute is the model endpoint of a box.
type ModelRoute struct {
	// Upstream is the API base, e.g. https://api.anthropic.com; nil means
	// DefaultModelUpstream.
	Upstream *url.URL
	// APIKey is sent as x-api-key.
	APIKey string
	// MaxRequests and MaxTokens bound the box's use; 0 means no bound.
	// Tokens are input (including cache reads and writes) plus output.
	MaxRequests, MaxTokens int64
	// Used is what the box has spent so far.
	Used Usage
}

// MCPRoute is one operator-configured MCP server (Streamable HTTP).
type MCPRoute struct {
	URL     *url.URL
	Headers map[string]string
}

// Usage is model use: requests, and tokens as the API reports them. Input
// counts input_tokens plus cache creation and cache read tokens.
type Usage struct {
	Requests     int64
	InputTokens  int64
	OutputTokens int64
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Kinds of Decision.
const (
	KindEgress = "egress"
	KindGit    = "git"
	KindModel  = "model"
	KindMCP    = "mcp"
)

// Verdicts of a Decision.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Decision is one audited decision.
type Decision struct {
	Box     string
	Kind    string // KindEgress, KindGit, KindModel, KindMCP
	Host    string // destination name or address as the box asked for it
	Port    int
	Addr    string // the address dialed or refused, when resolved
	Verdict string // Allow or Deny
	Reason  string
	Detail  string // e.g. "CONNECT", the git service, the refs pushed
}

// DefaultModelUpstream is the Messages API.
const DefaultModelUpstream = "https://api.anthropic.com"

// GatewayHost is the only address a box reaches.
const GatewayHost = "10.0.2.100"

// Resolver looks up the addresses of a name; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens a TCP connection to an address the policy checked; the
// signature of net.Dialer.DialContext.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// Config configures a Server. The zero value (with a Policy) works.
type Config struct {
	Policy Policy
	Logger *slog.Logger
	// Resolver resolves egress destinations and the git, model and MCP
	// upstreams; nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to a checked address ("1.2.3.4:443"), for the egress
	// proxy and the upstreams alike, within DialTimeout; nil means a
	// net.Dialer. Tests record the dials with it.
	Dial Dialer
	// PrivateUpstreams are the forbidden addresses the git, model and MCP
	// upstreams may have all the same (the operator's
	// net.private_upstreams: an on-premises git host, a local model proxy).
	// They never open the egress proxy. Empty: no private upstream.
	PrivateUpstreams []netpolicy.Trust
	// MaxHeaderBytes bounds a request's header; 0 means 64 KiB.
	MaxHeaderBytes int
	// HeaderTimeout bounds reading a request header; 0 means 30 s.
	HeaderTimeout time.Duration
	// IdleTimeout closes an idle keep-alive connection or CONNECT tunnel;
	// 0 means 5 min.
	IdleTimeout time.Duration
	// MaxTunnels bounds a box's concurrent CONNECT tunnels and plain HTTP
	// proxy requests; 0 means 64.
	MaxTunnels int
	// DialTimeout bounds an egress dial; 0 means 15 s.
	DialTimeout time.Duration
	// MaxConns bounds a box's concurrent connections to the gateway (each
	// guest TCP connection is one); further ones wait to be accepted. 0 means
	// 256.
	MaxConns int
	// MaxBodyBytes bounds a model or MCP request body; 0 means 64 MiB. Git
	// bodies (packs) are not bounded here.
	MaxBodyBytes int64

	// EgressTrust are forbidden destinations the egress proxy may dial
	// nonetheless (as PrivateUpstreams are for the MCP relay). No
	// configuration key sets it and the shipped binary sets none: tests
	// reaching local servers bring theirs (netpolicy.LoopbackTrust); every
	// other forbidden range stays refused.
	EgressTrust []netpolicy.Trust
	// LocalAddrs lists the gateway host's own addresses, which a mirror
	// reaches only through a range of exactly that address; nil means the
	// addresses of the host's interfaces.
	LocalAddrs func() []netip.Addr
}

// Server serves the network path of every box.
type Server struct {
	cfg       Config
	log       *slog.Logger
	handler   http.Handler
	transport http.RoundTripper

	mu    sync.Mutex
	boxes map[string]*boxState
}

// boxState is the per-box bookkeeping shared by all of a box's connections.
type boxState struct {
	name    string
	tunnels chan struct{} // a slot per concurrent tunnel
}

type boxKey struct{}

// New returns a Server. It panics without a Policy: that is a programming
// error, not a runtime condition.
func New(cfg Config) *Server {
	if cfg.Policy == nil {
		panic("boxnet: Config.Policy is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.MaxTunnels <= 0 {
		cfg.MaxTunnels = 64
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 15 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.LocalAddrs == nil {
		cfg.LocalAddrs = interfaceAddrs
	}
	if cfg.Dial == nil {
		cfg.Dial = (&net.Dialer{}).DialContext
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "boxnet"), boxes: map[string]*boxState{}}
	t := http.DefaultTransport.(*http.Transport).Clone()
	// The gateway's own proxy settings are not the box's business: go
	// direct, and only to the address the request's check let through.
	t.Proxy = nil
	t.DialContext = s.dialUpstream
	s.transport = t
	s.handler = http.HandlerFunc(s.serveHTTP)
	return s
}

// Serve answers the connections of box on ln until ctx ends or ln fails. It
// closes ln. Tests pass a TCP listener, production the box's unix socket.
func (s *Server) Serve(ctx context.Context, box string, ln net.Listener) error {
	if box == "" {
		ln.Close()
		return errors.New("boxnet: serve: empty box name")
	}
	st := s.state(box)
	hs := &http.Server{
		Handler:           s.handler,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		// Requests and tunnels end with ctx: a stopped box keeps nothing
		// open through the gateway.
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(ctx, boxKey{}, st)
		},
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				hs.Close()
			}
		case <-done:
		}
	}()
	err := hs.Serve(&limitListener{Listener: ln, sem: make(chan struct{}, s.cfg.MaxConns)})
	close(done)
	if errors.Is(err, http.ErrServerClosed) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("boxnet: serve box %s: %w", box, err)
}

func (s *Server) state(box string) *boxState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.boxes[box]
	if st == nil {
		st = &boxState{name: box, tunnels: make(chan struct{}, s.cfg.MaxTunnels)}
		s.boxes[box] = st
	}
	return st
}

// limitListener holds a slot per open connection; Accept waits for one.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// CloseWrite keeps half-close working through the wrapper: a tunnel passes
// one side's EOF on without cutting the other direction.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Forget drops the bookkeeping of a destroyed box.
func (s *Server) Forget(box string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.boxes, box)
}

// endpoint is one service a box reaches on 10.0.2.100:80.
type endpoint struct {
	name  string
	match func(r *http.Request) bool
	serve func(s *Server, w http.ResponseWriter, r *http.Request, st *boxState)
}

// Names of the endpoints.
const (
	endpointConnect = "egress CONNECT"
	endpointProxy   = "egress plain HTTP"
	endpointGit     = "git"
	endpointModel   = "model"
	endpointMCP     = "mcp"
)

// endpoints are every service a box reaches, in the order a request is
// matched against them: the whole of the box's network path (anything else
// is 404). The endpoint matrix test enumerates this list.
func endpoints() []endpoint {
	return []endpoint{
		{endpointConnect, func(r *http.Request) bool { return r.Method == http.MethodConnect }, (*Server).connect},
		{endpointProxy, func(r *http.Request) bool { return !local(r) }, (*Server).forward},
		{endpointGit, func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/git/") }, (*Server).git},
		{endpointModel, func(r *http.Request) bool {
			return r.URL.Path == "/model" || strings.HasPrefix(r.URL.Path, "/model/")
		}, (*Server).model},
		{endpointMCP, func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/mcp/") }, (*Server).mcp},
	}
}

// local reports whether a request is for the gateway itself: origin form,
// or a proxy request for the gateway's own address (a client with
// HTTP_PROXY set and no NO_PROXY for the gateway asks the proxy for the
// gateway's URLs; its address means the gateway, whatever the port).
func local(r *http.Request) bool {
	if !r.URL.IsAbs() && r.URL.Host == "" {
		return true
	}
	return r.URL.Hostname() == GatewayHost && r.URL.Scheme == "http"
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	st, _ := r.Context().Value(boxKey{}).(*boxState)
	if st == nil {
		http.Error(w, "no box", http.StatusInternalServerError)
		return
	}
	for _, e := range endpoints() {
		if e.match(r) {
			e.serve(s, w, r, st)
			return
		}
	}
	http.Error(w, "sbx gateway: unknown endpoint (egress goes through HTTP_PROXY/HTTPS_PROXY; git under /git/, the model under /model/, MCP under /mcp/)", http.StatusNotFound)
}

func (s *Server) audit(ctx context.Context, d Decision) {
	s.cfg.Policy.Audit(ctx, d)
	lvl := slog.LevelDebug
	if d.Verdict == Deny {
		lvl = slog.LevelInfo
	}
	s.log.Log(ctx, lvl, "boxnet decision", "box", d.Box, "kind", d.Kind, "host", d.Host, "port", d.Port, "addr", d.Addr, "verdict", d.Verdict, "reason", d.Reason)
}

// cleanSubpath reports whether an URL path is free of dot segments, empty
// segments and encoded separators, so that what is checked is what the
// upstream sees.
func cleanSubpath(r *http.Request) bool {
	raw := r.URL.EscapedPath()
	lower := strings.ToLower(raw)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(lower, "%2e") || strings.Contains(lower, "%00") {
		return false
	}
	for _, seg := range strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
			return false
		}
	}
	return true
}

// stripCredentials removes whatever credentials the box sent: the gateway
// adds the real ones.
func stripCredentials(h http.Header) {
	for _, k := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key"} {
		h.Del(k)
	}
}

// joinPath appends a sub path (starting with "/" or empty) to base's path.
func joinPath(base *url.URL, sub string) *url.URL {
	u := *base
	u.User = nil
	u.Fragment = ""
	u.RawPath = ""
	u.Path = strings.TrimSuffix(base.Path, "/") + sub
	return &u
}
