package web

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/alexedwards/scs/v2"

	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// The browser console: server-rendered pages (views/), cookie sessions
// (scs over the store), and SSE for the live parts. Every state-changing
// console route is a POST behind http.CrossOriginProtection; no route but
// /login/{token} carries a credential in its URL.

// Session defaults (web.session_idle, web.session_lifetime).
const (
	DefaultSessionIdle     = 12 * time.Hour
	DefaultSessionLifetime = 7 * 24 * time.Hour
	// SessionCookie is the cookie's name.
	SessionCookie = "sbx_session"
	sidKey        = "sid"
	flashKey      = "flash"
)

// consoleCSP is the CSP of HTML pages: the seed's, plus where violations
// are reported (JSON and artifact responses keep the bare CSP).
const consoleCSP = CSP + "; report-uri /csp-report"

func (s *Server) initConsole() {
	if s.Fleet != nil && s.boxes == nil {
		s.boxes = coreBoxes{s.Fleet}
	}
	if s.Sessions == nil {
		return
	}
	sm := scs.New()
	sm.Store = s.Sessions
	sm.IdleTimeout = s.SessionIdle
	if sm.IdleTimeout <= 0 {
		sm.IdleTimeout = DefaultSessionIdle
	}
	sm.Lifetime = s.SessionLifetime
	if sm.Lifetime <= 0 {
		sm.Lifetime = DefaultSessionLifetime
	}
	sm.Cookie.Name = SessionCookie
	sm.Cookie.HttpOnly = true
	sm.Cookie.SameSite = http.SameSiteLaxMode
	sm.Cookie.Secure = s.SecureCookies
	sm.Cookie.Path = "/"
	sm.Cookie.Persist = true
	sm.ErrorFunc = func(w http.ResponseWriter, r *http.Request, err error) {
		Logger(r.Context()).ErrorContext(r.Context(), "session store", "err", err)
		s.htmlError(w, r, http.StatusInternalServerError, "internal error")
	}
	s.sm = sm
	s.cop = http.NewCrossOriginProtection()
	s.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Logger(r.Context()).WarnContext(r.Context(), "cross-origin request refused", "origin", r.Header.Get("Origin"),
			"sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		s.htmlError(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
}

// open wraps a console route that needs the session but no login (login).
func (s *Server) open(h http.HandlerFunc) http.Handler {
	if s.sm == nil {
		return http.HandlerFunc(s.consoleOff)
	}
	return s.cop.Handler(secureOverTLS(s.sm.LoadAndSave(h)))
}

// page wraps a console route that needs a logged-in user.
func (s *Server) page(h http.HandlerFunc) http.Handler {
	if s.sm == nil {
		return http.HandlerFunc(s.consoleOff)
	}
	return s.cop.Handler(secureOverTLS(s.sm.LoadAndSave(s.loggedIn(h))))
}

// secureOverTLS marks the session cookie Secure on a request that came over
// TLS, whatever SecureCookies says (that option is for a TLS proxy in
// front, which the gateway cannot see).
func secureOverTLS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&secureCookieWriter{ResponseWriter: w}, r)
	})
}

// secureCookieWriter adds Secure to the session cookie as headers go out
// (scs sets the cookie in the header map just before).
type secureCookieWriter struct {
	http.ResponseWriter
	done bool
}

func (w *secureCookieWriter) fix() {
	if w.done {
		return
	}
	w.done = true
	h := w.Header()
	for i, c := range h["Set-Cookie"] {
		if strings.HasPrefix(c, SessionCookie+"=") && !strings.Contains(c, "; Secure") {
			h["Set-Cookie"][i] = c + "; Secure"
		}
	}
}

func (w *secureCookieWriter) WriteHeader(code int) {
	w.fix()
	w.ResponseWriter.WriteHeader(code)
}

func (w *secureCookieWriter) Write(p []byte) (int, error) {
	w.fix()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush (SSE).
func (w *secureCookieWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) consoleOff(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusServiceUnavailable, "web console disabled: the gateway has no session store")
}

// loggedIn resolves the session's login on every request: a revoked or
// logged-out login, or a disabled user, sends the browser to log in.
func (s *Server) loggedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		sid := s.sm.GetString(ctx, sidKey)
		if sid == "" {
			s.toLogin(w, r)
			return
		}
		u, sess, err := s.Identity.SessionUser(ctx, sid)
		if errors.Is(err, keys.ErrNoSession) {
			_ = s.sm.Destroy(ctx)
			s.toLogin(w, r)
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if s.Rate != nil {
			if wait, ok := s.Rate.Allow(u.Name); !ok {
				retryAfter(w, wait)
				s.htmlError(w, r, http.StatusTooManyRequests, "rate limit exceeded; retry later")
				return
			}
		}
		c := caller{User: u, Addr: s.clientAddr(r), Session: sess.ID, front: "web"}
		ctx = context.WithValue(ctx, callerKey, c)
		ctx = context.WithValue(ctx, loggerKey, Logger(ctx).With("user", u.Name))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// toLogin answers a request without a valid session: a page load goes to
// /login; htmx and event streams get 401 (htmx follows HX-Redirect).
func (s *Server) toLogin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", "/login")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") || r.Method != http.MethodGet {
		s.htmlError(w, r, http.StatusUnauthorized, "log in first")
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// frame is the page frame for the request's user, with the pending flash.
func (s *Server) frame(r *http.Request, title string) views.Page {
	p := views.Page{Title: title}
	if c, ok := callerFrom(r.Context()); ok {
		p.User, p.Admin = c.User.Name, c.User.Role == keys.RoleAdmin
	}
	if s.sm != nil {
		p.Flash = s.sm.PopString(r.Context(), flashKey)
	}
	return p
}

// render writes a page. Pages are never cached: they hold box data.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", s.pageCSP())
	w.WriteHeader(status)
	if err := c.Render(r.Context(), w); err != nil {
		Logger(r.Context()).WarnContext(r.Context(), "render page", "err", err)
	}
}

// htmlError answers a console route with an error page (or, for an htmx
// fragment, the message alone).
func (s *Server) htmlError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, status, views.FragmentError(msg))
		return
	}
	p := views.Page{Title: "Error"}
	if c, ok := callerFrom(r.Context()); ok {
		p.User, p.Admin = c.User.Name, c.User.Role == keys.RoleAdmin
	}
	s.render(w, r, status, views.ErrorPage(p, status, msg, RequestID(r.Context())))
}

// shown is what an error is answered with: its kind's status and its own
// message (the core's and identity's messages are already redacted and meant
// to be shown), or, for an error of no kind, 500 and "internal error" — its
// text may say too much, so it is logged only.
func shown(r *http.Request, err error) (int, string) {
	code := errkind.HTTPStatus(err)
	if code == http.StatusInternalServerError {
		Logger(r.Context()).ErrorContext(r.Context(), "request failed", "err", err)
		return code, "internal error"
	}
	return code, err.Error()
}

// failPage shows an error on a console route.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := shown(r, err)
	s.htmlError(w, r, code, msg)
}

// core returns the box core or answers 503 when the gateway has none.
func (s *Server) core(w http.ResponseWriter, r *http.Request) (boxes, bool) {
	if s.boxes == nil {
		s.htmlError(w, r, http.StatusServiceUnavailable, "boxes are not available: this gateway runs without the fleet core")
		return nil, false
	}
	return s.boxes, true
}

// form parses a POSTed form under the body limit.
func (s *Server) form(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, s.BodyLimit)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.htmlError(w, r, http.StatusRequestEntityTooLarge, "form too large")
		} else {
			s.htmlError(w, r, http.StatusBadRequest, "malformed form")
		}
		return false
	}
	return true
}

// done ends a POST: flash msg and see other (POST, redirect, GET).
func (s *Server) done(w http.ResponseWriter, r *http.Request, to, msg string) {
	if msg != "" {
		s.sm.Put(r.Context(), flashKey, msg)
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// loginPage is where a browser without a session lands.
func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if sid := s.sm.GetString(r.Context(), sidKey); sid != "" {
		if _, _, err := s.Identity.SessionUser(r.Context(), sid); err == nil {
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
	}
	hint := s.LoginHint
	if hint == "" {
		hint = "ssh -p 2222 <gateway> login"
	}
	s.render(w, r, http.StatusOK, views.LoginPage(views.Page{Title: "Log in"}, hint))
}

// loginLink shows a confirm button: fetching the link (a chat preview, a
// prefetch) must not spend it, so only the POST does.
func (s *Server) loginLink(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	if !keys.ValidLoginToken(token) {
		s.Throttle.Fail(s.clientAddr(r))
		s.htmlError(w, r, http.StatusNotFound, keys.ErrBadLogin.Error())
		return
	}
	s.render(w, r, http.StatusOK, views.LoginConfirm(views.Page{Title: "Log in"}, keys.LoginPath+token))
}

// login spends the link and starts the session under a fresh cookie token
// (no fixation: whatever token the browser had is replaced).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	client := s.clientAddr(r)
	if wait, ok := s.Throttle.Check(client); !ok {
		s.metrics.Auth("web", metrics.ResultThrottled)
		retryAfter(w, wait)
		s.htmlError(w, r, http.StatusTooManyRequests, "too many failed authentication attempts; retry later")
		return
	}
	u, sess, err := s.Identity.Login(r.Context(), r.PathValue("token"), client, r.UserAgent())
	if err != nil {
		s.Throttle.Fail(client)
		s.metrics.Auth("web", metrics.ResultFail)
		Logger(r.Context()).InfoContext(r.Context(), "web login failed", "client", client, "err", err)
		s.htmlError(w, r, http.StatusUnauthorized, keys.ErrBadLogin.Error())
		return
	}
	s.metrics.Auth("web", metrics.ResultOK)
	if err := s.sm.RenewToken(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.sm.Put(r.Context(), sidKey, sess.ID)
	if c, ok := s.Sessions.(interface {
		DeleteExpired(context.Context) (int64, error)
	}); ok {
		// Logins are rare: a good moment to drop expired cookies' rows.
		if _, err := c.DeleteExpired(r.Context()); err != nil {
			Logger(r.Context()).WarnContext(r.Context(), "delete expired sessions", "err", err)
		}
	}
	Logger(r.Context()).InfoContext(r.Context(), "web login", "user", u.Name, "client", client)
	s.done(w, r, "/", "")
}

// logout ends this login everywhere (every tab holding it) and the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if err := s.Identity.RevokeWebSession(r.Context(), c.actor(), c.User.Name, c.Session); err != nil && !errors.Is(err, keys.ErrNotFound) {
		s.failPage(w, r, err)
		return
	}
	if err := s.sm.RenewToken(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.sm.Destroy(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
