// Package web is the gateway's HTTP front: security headers, request ids,
// JSON errors, body limits, API-key authentication with the shared throttle
// and the per-user rate limit, metrics, the JSON API, /mcp, and the browser
// console (console.go): templ pages from views/, scs cookie sessions started
// by one-time login links, htmx with SSE for the live fleet and box log.
//
// Console routes: GET /login, GET|POST /login/{token} (the only URL that
// carries a token; GET shows a button, POST spends it), POST /logout, GET /
// (fleet), GET /events (fleet SSE), GET|POST /delegate, GET /delegate/{id}
// (a delegation's steps; /stream: SSE), GET /boxes/{box},
// GET /boxes/{box}/stream (status and log SSE; id = log offset, so
// Last-Event-ID resumes), /log.txt, /diff, /files, /artifact (download only,
// sandboxed), POST /boxes/{box}/{answer,sleep,wake,keep,unkeep,destroy,title,repos,extend,preview,checkpoint,rewind,fork},
// GET /boxes/{box}/checkpoints, POST /boxes/{box}/checkpoints/{id}/delete,
// GET /settings with its POSTs, GET /audit and GET|POST /pool (admins: the
// warm pool, pool.go), POST /csp-report,
// GET /static/. Every state-changing console route is a POST behind
// http.CrossOriginProtection.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alexedwards/scs/v2"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/buildinfo"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/static"
)

// Identity is what the HTTP front needs from keys.Service.
type Identity interface {
	UserByAPIKey(ctx context.Context, token string) (keys.User, keys.APIKey, error)
	CreateAPIKey(ctx context.Context, actor keys.Actor, user, name string, scopes []string, ttl time.Duration) (string, keys.APIKey, error)
	APIKeys(ctx context.Context, actor keys.Actor, user string) ([]keys.APIKey, error)
	RevokeAPIKey(ctx context.Context, actor keys.Actor, user, id string) error

	// Browser logins (keys/login.go, keys/session.go).
	Login(ctx context.Context, token, addr, agent string) (keys.User, keys.WebSession, error)
	SessionUser(ctx context.Context, id string) (keys.User, keys.WebSession, error)
	WebSessions(ctx context.Context, actor keys.Actor, user string) ([]keys.WebSession, error)
	RevokeWebSession(ctx context.Context, actor keys.Actor, user, id string) error
}

// AuditLog is what the audit page reads; *audit.Log implements it.
type AuditLog interface {
	List(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// Options configures a Server.
type Options struct {
	Identity Identity
	Throttle *throttle.Auth
	Rate     *throttle.Rate // nil: no per-user limit
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// TrustedProxies may set X-Forwarded-For.
	TrustedProxies []netip.Prefix
	// BodyLimit caps JSON bodies unless a route sets its own.
	BodyLimit int64
	// MetricsAuth puts /metrics behind an admin API key.
	MetricsAuth bool
	// ExtraRoutes are handlers of the operator's own by mux pattern, served
	// through the same middleware (recovery, limits, metrics) as the
	// built-in routes.
	ExtraRoutes map[string]http.Handler

	// Fleet is the core behind the console's box pages; nil: they answer
	// 503 and say the gateway runs without it.
	Fleet *fleet.Fleet
	// Audit feeds the admin audit page; nil: the page says it is missing.
	Audit AuditLog
	// MCP is mounted at /mcp; it authenticates API keys itself. nil: 404.
	MCP http.Handler
	// Sessions stores browser sessions (store.SQLite.SessionStore); nil
	// turns the console off (the JSON API keeps working).
	Sessions scs.Store
	// SessionIdle and SessionLifetime end a browser session after that long
	// unused, or that long after login (defaults 12 h and 7 d).
	SessionIdle, SessionLifetime time.Duration
	// SecureCookies marks the session cookie Secure: set it when the
	// browser reaches the gateway over TLS (directly or via a proxy).
	SecureCookies bool
	// LoginHint is the command the login page tells users to run, e.g.
	// "ssh -p 2222 sbx.example.com login".
	LoginHint string
	// Now is the clock of pages and reports (default time.Now).
	Now func() time.Time
	// PreviewURL is the base URL of the preview listener (preview.go);
	// nil or "" turns the box page's preview form into a clear refusal.
	PreviewURL func() string
}

// Server is the HTTP handler of the gateway.
type Server struct {
	Options
	mux     *http.ServeMux
	log     *slog.Logger
	metrics *metrics.Metrics
	handler http.Handler

	boxes       boxes                       // the core as the console uses it; nil without one
	delegations delegations                 // the delegate form's, while they run and a while after
	sm          *scs.SessionManager         // nil: console off
	cop         *http.CrossOriginProtection // guards every cookie-authenticated POST
	csp         cspLog

	patterns []string // every route, in the order handle registered them

	closing   chan struct{} // closed by CloseStreams
	closeOnce sync.Once
}

// CloseStreams ends every open event stream (browsers reconnect, to this
// gateway's successor). http.Server.Shutdown does not cancel the requests
// it waits for, so register it: srv.RegisterOnShutdown(web.CloseStreams).
func (s *Server) CloseStreams() {
	s.closeOnce.Do(func() { close(s.closing) })
}

// New builds the handler with every route.
func New(o Options) *Server {
	return newServer(o, nil)
}

// newServer builds the server over core (tests pass a scripted one; nil
// means o.Fleet).
func newServer(o Options, core boxes) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = slog.New(LogHandler(o.Logger.Handler()))
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = 1 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{Options: o, mux: http.NewServeMux(), log: o.Logger, metrics: o.Metrics, boxes: core, closing: make(chan struct{})}
	s.initConsole()
	s.routes()
	s.handler = s.outer(http.HandlerFunc(s.dispatch))
	return s
}

// handle registers a route; Routes lists them (the access matrix test
// refuses a route it has no entry for).
func (s *Server) handle(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

// Routes returns the pattern of every registered route.
func (s *Server) Routes() []string { return slices.Clone(s.patterns) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) routes() {
	s.handle("GET /healthz", http.HandlerFunc(s.healthz))
	if s.MetricsAuth {
		s.handle("GET /metrics", s.authed(s.adminOnly(s.metrics.Handler())))
	} else {
		// Metrics hold counts, never box data or names, so they are public
		// unless the operator says otherwise.
		s.handle("GET /metrics", s.metrics.Handler())
	}
	s.handle("GET /api/v1/whoami", s.authed(http.HandlerFunc(s.whoami)))
	s.handle("GET /api/v1/tokens", s.authed(http.HandlerFunc(s.listTokens)))
	s.handle("POST /api/v1/tokens", s.authed(http.HandlerFunc(s.createToken)))
	s.handle("DELETE /api/v1/tokens/{id}", s.authed(http.HandlerFunc(s.revokeToken)))
	s.consoleRoutes()
	for pattern, h := range s.ExtraRoutes {
		s.handle(pattern, h)
	}
}

// route is the metrics label for r: its mux pattern, or "unmatched".
func (s *Server) route(r *http.Request) string {
	if _, p := s.mux.Handler(r); p != "" {
		return p
	}
	return "unmatched"
}

// dispatch routes r; the mux's own 404 and 405 answers (plain text) are
// turned into JSON, keeping the status and the Allow header.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	if _, p := s.mux.Handler(r); p != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	rec := &headerRecorder{h: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	switch {
	case rec.status == http.StatusMethodNotAllowed:
		w.Header().Set("Allow", rec.h.Get("Allow"))
		writeError(w, r, rec.status, "method not allowed")
	case rec.status >= 300 && rec.status < 400:
		w.Header().Set("Location", rec.h.Get("Location"))
		writeError(w, r, rec.status, "moved")
	default:
		writeError(w, r, http.StatusNotFound, "not found")
	}
}

// headerRecorder captures what the mux's fallback handler would answer.
type headerRecorder struct {
	h      http.Header
	status int
}

func (r *headerRecorder) Header() http.Header { return r.h }
func (r *headerRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *headerRecorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return len(p), nil
}

// clientAddr is the throttle key for r.
func (s *Server) clientAddr(r *http.Request) string {
	return throttle.ClientAddr(r.RemoteAddr, r.Header.Get("X-Forwarded-For"), s.TrustedProxies)
}

// errorBody is every error answer.
type errorBody struct {
	Error     string `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg, RequestID: RequestID(r.Context())})
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(d, time.Second).Seconds()))))
}

// WithBodyLimit overrides the JSON body cap for one route (uploads).
func WithBodyLimit(n int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyLimitKey, n)))
	})
}

// JSONReadTimeout bounds reading one JSON body.
const JSONReadTimeout = 30 * time.Second

// errAnswered means decodeJSON already wrote the error response.
var errAnswered = errors.New("response written")

// decodeJSON reads one JSON object into v under the route's body limit.
// Oversized bodies get 413, malformed ones 400, both as JSON.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	limit := s.BodyLimit
	if n, ok := r.Context().Value(bodyLimitKey).(int64); ok {
		limit = n
	}
	if r.ContentLength > limit {
		writeError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: %d bytes, limit %d", r.ContentLength, limit))
		return errAnswered
	}
	// The server has no global read timeout (uploads and streams differ);
	// a JSON body must arrive in reasonable time, not trickle in.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(JSONReadTimeout))
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		// One object only: trailing data is a malformed body.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooBig):
		writeError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: limit %d bytes", tooBig.Limit))
	case errors.Is(err, io.EOF):
		writeError(w, r, http.StatusBadRequest, "malformed JSON: empty body")
	default:
		writeError(w, r, http.StatusBadRequest, "malformed JSON: "+strings.TrimPrefix(err.Error(), "json: "))
	}
	return errAnswered
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": buildinfo.Get().Short()})
}

func (s *Server) now() time.Time { return s.Now() }

// consoleRoutes are the browser's: pages (GET), forms (POST, redirect),
// event streams, static files, the CSP report endpoint and /mcp.
func (s *Server) consoleRoutes() {
	s.handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	s.handle("POST /csp-report", http.HandlerFunc(s.cspReport))
	if s.MCP != nil {
		mcp := s.MCP
		limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, s.BodyLimit)
			mcp.ServeHTTP(w, r)
		})
		s.handle("/mcp", limited)
		s.handle("/mcp/", limited)
	}

	s.handle("GET /login", s.open(s.loginPage))
	s.handle("GET /login/{token}", s.open(s.loginLink))
	s.handle("POST /login/{token}", s.open(s.login))
	s.handle("POST /logout", s.page(s.logout))

	s.handle("GET /{$}", s.page(s.fleetPage))
	s.handle("GET /events", s.page(s.fleetEvents))
	s.handle("GET /delegate", s.page(s.delegateForm))
	s.handle("POST /delegate", s.page(s.delegate))
	s.handle("GET /delegate/{id}", s.page(s.delegation))
	s.handle("GET /delegate/{id}/stream", s.page(s.delegationStream))
	s.handle("GET /boxes/{box}", s.page(s.boxPage))
	s.handle("GET /boxes/{box}/stream", s.page(s.boxStream))
	s.handle("GET /boxes/{box}/log.txt", s.page(s.logText))
	s.handle("GET /boxes/{box}/diff", s.page(s.diff))
	s.handle("GET /boxes/{box}/files", s.page(s.files))
	s.handle("GET /boxes/{box}/artifact", s.page(s.artifact))
	s.handle("POST /boxes/{box}/answer", s.page(s.answer))
	s.handle("POST /boxes/{box}/inbox/{id}/delete", s.page(s.removeInbox))
	s.handle("POST /boxes/{box}/pr", s.page(s.openPR))
	s.handle("POST /boxes/{box}/pr/merge", s.page(s.mergePR))
	s.handle("POST /boxes/{box}/pr/close", s.page(s.closePR))
	s.handle("POST /boxes/{box}/ask", s.page(s.ask))
	s.handle("POST /boxes/{box}/allow", s.page(s.setAllow))
	for _, a := range []string{"sleep", "wake", "keep", "unkeep", "destroy"} {
		s.handle("POST /boxes/{box}/"+a, s.page(s.boxAction(a)))
	}
	s.handle("POST /boxes/{box}/title", s.page(s.boxForm(setTitle)))
	s.handle("POST /boxes/{box}/repos", s.page(s.boxForm(addRepo)))
	s.handle("POST /boxes/{box}/extend", s.page(s.boxForm(extend)))
	s.handle("POST /boxes/{box}/preview", s.page(s.previewLink))
	s.handle("GET /boxes/{box}/checkpoints", s.page(s.checkpoints))
	s.handle("POST /boxes/{box}/checkpoint", s.page(s.boxForm(checkpoint)))
	s.handle("POST /boxes/{box}/rewind", s.page(s.boxForm(rewind)))
	s.handle("POST /boxes/{box}/checkpoints/{id}/delete", s.page(s.boxForm(removeCheckpoint)))
	s.handle("POST /boxes/{box}/fork", s.page(s.fork))
	s.handle("GET /settings", s.page(s.settings))
	s.handle("POST /settings/accounts", s.page(s.addAccount))
	s.handle("POST /settings/accounts/{name}/default", s.page(s.accountAction("default")))
	s.handle("POST /settings/accounts/{name}/delete", s.page(s.accountAction("delete")))
	s.handle("POST /settings/mcp", s.page(s.addMCPServer))
	s.handle("POST /settings/mcp/{name}/delete", s.page(s.removeMCPServer))
	s.handle("POST /settings/notify", s.page(s.addChannel))
	for _, a := range []string{"delete", "test", "enable", "disable"} {
		s.handle("POST /settings/notify/{name}/"+a, s.page(s.channelAction(a)))
	}
	s.handle("POST /settings/presets", s.page(s.setDefaultPresets))
	s.handle("POST /settings/profiles", s.page(s.saveProfile))
	s.handle("POST /settings/profiles/default", s.page(s.setRepoProfile))
	s.handle("POST /settings/profiles/{name}/delete", s.page(s.deleteProfile))
	s.handle("POST /settings/keys", s.page(s.createKey))
	s.handle("POST /settings/keys/{id}/revoke", s.page(s.revokeKey))
	s.handle("POST /settings/sessions/{id}/revoke", s.page(s.revokeSession))
	s.handle("GET /audit", s.page(s.auditPage))
	s.handle("GET /pool", s.page(s.poolPage))
	s.handle("POST /pool", s.page(s.setPool))
}

// staticHandler serves the embedded htmx and css; they change only with
// the binary, so browsers may keep them for an hour.
func staticHandler() http.Handler {
	files := http.FileServerFS(static.Files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only existing files go to the file server: its 404 is a
		// text/plain page, and every error here is JSON.
		if strings.HasSuffix(r.URL.Path, "/") || r.URL.Path == "" {
			writeError(w, r, http.StatusNotFound, "not found")
			return
		}
		if st, err := fs.Stat(static.Files, strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")); err != nil || st.IsDir() {
			writeError(w, r, http.StatusNotFound, "not found")
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
