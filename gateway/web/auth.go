package web

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/keys"
)

// caller is the authenticated user of a request.
type caller struct {
	User keys.User
	Key  keys.APIKey // API-key requests
	Addr string
	// Session is the browser login's id (console requests).
	Session string
	front   string // "" means "http" (API key); "web" for the console
}

func callerFrom(ctx context.Context) (caller, bool) {
	c, ok := ctx.Value(callerKey).(caller)
	return c, ok
}

func (c caller) actor() keys.Actor {
	front := c.front
	if front == "" {
		front = "http"
	}
	a := keys.Actor{User: c.User.Name, Role: c.User.Role, Front: front, Addr: c.Addr}
	if c.Key.ID != "" {
		// Through an API key, the key's scopes and expiry bound the call.
		k := c.Key
		a.Key = &k
	}
	return a
}

// bearer extracts the API key from the Authorization header. Tokens are
// never read from the URL: they would end up in logs and Referer headers.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authed requires a valid API key. A client over the failure limit is
// refused before its token is even looked at; a failure counts against it;
// an authenticated user then passes the per-user rate limit.
func (s *Server) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := s.clientAddr(r)
		log := Logger(r.Context())
		if wait, ok := s.Throttle.Check(client); !ok {
			s.metrics.Auth("http", metrics.ResultThrottled)
			log.WarnContext(r.Context(), "http auth throttled", "client", client, "retry_after", wait)
			retryAfter(w, wait)
			writeError(w, r, http.StatusTooManyRequests, "too many failed authentication attempts; retry later")
			return
		}
		token, ok := bearer(r)
		if !ok {
			s.Throttle.Fail(client)
			s.metrics.Auth("http", metrics.ResultFail)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx"`)
			writeError(w, r, http.StatusUnauthorized, "missing API key: send Authorization: Bearer <key>")
			return
		}
		user, key, err := s.Identity.UserByAPIKey(r.Context(), token)
		if err != nil {
			s.Throttle.Fail(client)
			s.metrics.Auth("http", metrics.ResultFail)
			log.InfoContext(r.Context(), "http auth failed", "client", client, "err", err)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx", error="invalid_token"`)
			msg := keys.ErrBadToken.Error()
			if errors.Is(err, keys.ErrDisabled) {
				msg = keys.ErrDisabled.Error()
			}
			writeError(w, r, http.StatusUnauthorized, msg)
			return
		}
		s.metrics.Auth("http", metrics.ResultOK)
		if s.Rate != nil {
			if wait, ok := s.Rate.Allow(user.Name); !ok {
				log.WarnContext(r.Context(), "http rate limited", "user", user.Name, "retry_after", wait)
				retryAfter(w, wait)
				writeError(w, r, http.StatusTooManyRequests, "rate limit exceeded; retry later")
				return
			}
		}
		ctx := context.WithValue(r.Context(), callerKey, caller{User: user, Key: key, Addr: client})
		ctx = context.WithValue(ctx, loggerKey, log.With("user", user.Name))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := callerFrom(r.Context())
		if !ok || c.User.Role != keys.RoleAdmin {
			writeError(w, r, http.StatusForbidden, "admins only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// userJSON is the API shape of a user.
type userJSON struct {
	Name    string    `json:"name"`
	Role    string    `json:"role"`
	Created time.Time `json:"created"`
}

// apiKeyJSON is the API shape of an API key; the secret is never in it.
type apiKeyJSON struct {
	ID       string     `json:"id"`
	Name     string     `json:"name"`
	Scopes   []string   `json:"scopes"`
	Created  time.Time  `json:"created"`
	Expires  *time.Time `json:"expires,omitempty"`
	Revoked  *time.Time `json:"revoked,omitempty"`
	LastUsed *time.Time `json:"last_used,omitempty"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toAPIKeyJSON(k keys.APIKey) apiKeyJSON {
	scopes := k.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return apiKeyJSON{ID: k.ID, Name: k.Name, Scopes: scopes, Created: k.Created,
		Expires: optTime(k.Expires), Revoked: optTime(k.Revoked), LastUsed: optTime(k.LastUsed)}
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{
		"user":    userJSON{Name: c.User.Name, Role: string(c.User.Role), Created: c.User.Created},
		"api_key": toAPIKeyJSON(c.Key),
	})
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	list, err := s.Identity.APIKeys(r.Context(), c.actor(), c.User.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]apiKeyJSON, 0, len(list))
	for _, k := range list {
		out = append(out, toAPIKeyJSON(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// createTokenRequest is the body of POST /api/v1/tokens.
type createTokenRequest struct {
	Name    string   `json:"name"`
	Scopes  []string `json:"scopes"`
	Expires string   `json:"expires"` // Go duration, e.g. "720h"; empty: never
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	var req createTokenRequest
	if s.decodeJSON(w, r, &req) != nil {
		return
	}
	var ttl time.Duration
	if req.Expires != "" {
		d, err := time.ParseDuration(req.Expires)
		if err != nil || d <= 0 {
			writeError(w, r, http.StatusBadRequest, "expires: want a positive duration such as 720h, got "+req.Expires)
			return
		}
		ttl = d
	}
	if req.Name == "" {
		req.Name = "http-" + time.Now().UTC().Format("20060102-150405")
	}
	token, key, err := s.Identity.CreateAPIKey(r.Context(), c.actor(), c.User.Name, req.Name, req.Scopes, ttl)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": token, "api_key": toAPIKeyJSON(key)})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if err := s.Identity.RevokeAPIKey(r.Context(), c.actor(), c.User.Name, r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fail answers an error on an API route (see shown).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := shown(r, err)
	writeError(w, r, code, msg)
}
