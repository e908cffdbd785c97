// Package mcp is the gateway's MCP front: the fleet as MCP tools over
// Streamable HTTP, authenticated with per-user API keys.
//
// One handler serves both protocol eras: requests that announce protocol
// 2026-07-28 or later (Mcp-Protocol-Version) go to a stateless handler, the
// rest (initialize, 2025-11-25 sessions) to a stateful one with sessions.
// Both share one mcp.Server, so the tools are identical.
//
// Authentication happens here, before the SDK sees the request:
// Authorization: Bearer sbx_… resolved through Identity.UserByAPIKey, the
// shared failed-auth throttle (429 with Retry-After), keys refused in a query
// string (400). The caller's identity then travels in the request's
// auth.TokenInfo, so every tool call resolves boxes through the caller (the
// core answers another user's box as not found), and the SDK refuses a
// stateful session to anyone but the user who opened it.
//
// Scopes are the core's (keys.Rights, checked by fleet for every call): a
// "read" key may call the tools that change nothing, a "write" key every
// tool. Every tool call is one audit row (mcp.<tool>, the box, the result).
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/keys"
)

// Identity is what the MCP front needs from keys.Service.
type Identity interface {
	UserByAPIKey(ctx context.Context, token string) (keys.User, keys.APIKey, error)
}

// Audit records one row per tool call; audit.Log implements it.
type Audit interface {
	Record(ctx context.Context, e audit.Entry) error
}

// Defaults for Options.
const (
	DefaultWaitMax        = 50 * time.Second
	DefaultBodyLimit      = 1 << 20
	DefaultSessionTimeout = 30 * time.Minute
)

// Options configures the handler. Identity and Throttle are required.
type Options struct {
	// Fleet is the core. Nil disables every tool with a message saying so
	// (authentication still works).
	Fleet    *fleet.Fleet
	Identity Identity
	Throttle *throttle.Auth
	// Rate is the per-user request limit shared with the HTTP API (nil: none).
	Rate    *throttle.Rate
	Audit   Audit
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Now is the clock of audit rows; default time.Now.
	Now func() time.Time
	// WaitMax caps how long delegate and answer wait for the run to finish
	// or ask (default DefaultWaitMax).
	WaitMax time.Duration
	// TrustedProxies may set X-Forwarded-For.
	TrustedProxies []netip.Prefix
	// BodyLimit caps one request body (default DefaultBodyLimit).
	BodyLimit int64
	// SessionTimeout closes stateful sessions idle this long
	// (default DefaultSessionTimeout).
	SessionTimeout time.Duration
	// Version is reported as the server's version.
	Version string
}

// Front is "mcp" in audit rows, metrics and actors.
const Front = "mcp"

// New returns the MCP handler; mount it at /mcp.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WaitMax <= 0 {
		o.WaitMax = DefaultWaitMax
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	h := &handler{opts: o, fleet: o.Fleet, log: o.Logger}
	if o.Fleet == nil {
		h.log.Warn("mcp: no fleet configured; every tool answers that boxes are unavailable")
	}
	h.server = h.newServer()
	get := func(*http.Request) *sdk.Server { return h.server }
	h.stateful = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		Logger: o.Logger, MaxRequestBodyBytes: o.BodyLimit, SessionTimeout: o.SessionTimeout,
	})
	h.stateless = sdk.NewStreamableHTTPHandler(get, &sdk.StreamableHTTPOptions{
		Stateless: true, Logger: o.Logger, MaxRequestBodyBytes: o.BodyLimit,
		PropagateRequestCancellation: true,
	})
	// The SDK's middleware is the only way to hand it a TokenInfo; the
	// verifier just returns what authenticate already resolved.
	inject := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, fmt.Errorf("no caller: %w", auth.ErrInvalidToken)
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return h.authenticate(inject(http.HandlerFunc(h.route)))
}

type handler struct {
	opts      Options
	fleet     *fleet.Fleet
	log       *slog.Logger
	server    *sdk.Server
	stateful  http.Handler
	stateless http.Handler
}

// statelessVersion is the first protocol version without sessions.
const statelessVersion = "2026-07-28"

// route sends a request to the handler of its protocol era. Versions are
// dates, so they compare as strings.
func (h *handler) route(w http.ResponseWriter, r *http.Request) {
	if v := r.Header.Get("Mcp-Protocol-Version"); v >= statelessVersion {
		h.stateless.ServeHTTP(w, r)
		return
	}
	h.stateful.ServeHTTP(w, r)
}

type tokenInfoKey struct{}

// caller is the authenticated user of one request.
type caller struct {
	actor keys.Actor
	key   keys.APIKey
}

const callerExtra = "sbx.caller"

func callerOf(ti *auth.TokenInfo) (caller, bool) {
	if ti == nil {
		return caller{}, false
	}
	c, ok := ti.Extra[callerExtra].(caller)
	return c, ok
}

// tokenParams are query parameters that carry a credential in some client;
// sbx never reads one, and refuses the request so the client's author
// notices before the key lands in more logs.
var tokenParams = []string{"token", "access_token", "api_key", "apikey", "key", "auth", "authorization", "bearer"}

// keyInQuery says whether the URL carries something that looks like an API key.
func keyInQuery(u *url.URL) bool {
	if u.RawQuery == "" {
		return false
	}
	if strings.Contains(u.RawQuery, keys.TokenPrefix) {
		return true
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return true // unparseable: refuse rather than guess
	}
	for name, vals := range q {
		if strings.Contains(name, keys.TokenPrefix) {
			return true
		}
		for _, p := range tokenParams {
			if strings.EqualFold(name, p) {
				return true
			}
		}
		for _, v := range vals {
			if strings.Contains(v, keys.TokenPrefix) {
				return true
			}
		}
	}
	return false
}

// bearer extracts the API key from the Authorization header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (h *handler) clientAddr(r *http.Request) string {
	return throttle.ClientAddr(r.RemoteAddr, r.Header.Get("X-Forwarded-For"), h.opts.TrustedProxies)
}

func (h *handler) metric(result string) {
	if h.opts.Metrics != nil {
		h.opts.Metrics.Auth(Front, result)
	}
}

// authenticate admits a request with a valid API key, in the order the HTTP
// API uses: key in the URL refused, client over the failure limit refused
// before its token is looked at, a failure counted, then the per-user rate.
func (h *handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		log := h.log
		if keyInQuery(r.URL) {
			writeError(w, r, http.StatusBadRequest, "API keys are never accepted in the URL: remove it from the query string, revoke the key (it may be in logs now) and send Authorization: Bearer <key>")
			return
		}
		client := h.clientAddr(r)
		if wait, ok := h.opts.Throttle.Check(client); !ok {
			h.metric(metrics.ResultThrottled)
			log.WarnContext(ctx, "mcp auth throttled", "client", client, "retry_after", wait)
			retryAfter(w, wait)
			writeError(w, r, http.StatusTooManyRequests, "too many failed authentication attempts; retry later")
			return
		}
		token, ok := bearer(r)
		if !ok {
			h.opts.Throttle.Fail(client)
			h.metric(metrics.ResultFail)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx"`)
			writeError(w, r, http.StatusUnauthorized, "missing API key: send Authorization: Bearer <key> (create one with `ssh <gateway> token create`)")
			return
		}
		user, key, err := h.opts.Identity.UserByAPIKey(ctx, token)
		if err != nil {
			h.opts.Throttle.Fail(client)
			h.metric(metrics.ResultFail)
			log.InfoContext(ctx, "mcp auth failed", "client", client, "err", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx", error="invalid_token"`)
			msg := keys.ErrBadToken.Error()
			if errors.Is(err, keys.ErrDisabled) {
				msg = keys.ErrDisabled.Error()
			}
			writeError(w, r, http.StatusUnauthorized, msg)
			return
		}
		h.metric(metrics.ResultOK)
		if h.opts.Rate != nil {
			if wait, ok := h.opts.Rate.Allow(user.Name); !ok {
				log.WarnContext(ctx, "mcp rate limited", "user", user.Name, "retry_after", wait)
				retryAfter(w, wait)
				writeError(w, r, http.StatusTooManyRequests, "rate limit exceeded; retry later")
				return
			}
		}
		c := caller{
			actor: keys.Actor{User: user.Name, Role: user.Role, Front: Front, Addr: client, Key: &key},
			key:   key,
		}
		ti := &auth.TokenInfo{UserID: user.Name, Scopes: key.Scopes, Extra: map[string]any{callerExtra: c}}
		ctx = context.WithValue(ctx, tokenInfoKey{}, ti)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
