package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/throttle"
)

// Web previews of a box's port (fleet/preview.go). The console's box page
// posts "Preview port N" to POST /boxes/{box}/preview, which makes a link
// in the core and redirects to the preview listener, a separate origin
// (another port, ideally another host): box-made HTML on the console's
// origin would own the session. The preview handler (Preview) spends the
// link for its own cookie and proxies every request to the box's port
// through the core. It never reads the console's session: cookies are
// host-wide (not per port), so the console's cookie does reach it, and it
// is dropped with every other cookie before anything goes to the box; the
// box's Set-Cookie (which would land on the console's host), and the
// headers that act on a whole host (HSTS, Clear-Site-Data), are dropped
// from its answers. Every answer carries PreviewCSP.

// PreviewCookie is the preview's session cookie, on the preview origin only.
const PreviewCookie = "sbx_preview"

// previewOpenPath spends a link; paths under /.sbx/ are the gateway's own
// on the preview origin, never the box's.
const previewOpenPath = "/.sbx/open"

// PreviewCSP sandboxes box-made pages: they may run their own scripts and
// talk to their own origin, nothing else (no fetch, image, frame or form to
// the console or anywhere), may not be framed by another origin, and run
// in a sandbox with no top-level navigation of other windows.
const PreviewCSP = "default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval'; connect-src 'self'; form-action 'self'; " +
	"frame-ancestors 'self'; base-uri 'self'; object-src 'none'; " +
	"sandbox allow-scripts allow-forms allow-same-origin allow-popups allow-modals allow-downloads"

// openPageCSP is the CSP of the gateway's own pages on the preview origin.
const openPageCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// previewLink is the box page's "Preview port N" form: the core makes a
// link (owner or admin, the box awake, audited) and the browser goes to
// the preview origin with it.
func (s *Server) previewLink(w http.ResponseWriter, r *http.Request) {
	if s.Fleet == nil {
		s.htmlError(w, r, http.StatusServiceUnavailable, "boxes are not available: this gateway runs without the fleet core")
		return
	}
	if !s.form(w, r) {
		return
	}
	base := ""
	if s.PreviewURL != nil {
		base = s.PreviewURL()
	}
	if base == "" {
		s.failPage(w, r, fmt.Errorf("web previews are off on this gateway: its operator sets web.preview_addr: %w", fleet.ErrUnavailable))
		return
	}
	raw := strings.TrimSpace(r.PostFormValue("port"))
	port, err := strconv.Atoi(raw)
	if err != nil || port < 1 || port > 65535 {
		s.failPage(w, r, fmt.Errorf("port %q: want a number from 1 to 65535: %w", raw, fleet.ErrInvalid))
		return
	}
	c, _ := callerFrom(r.Context())
	t, err := s.Fleet.PreviewLink(r.Context(), c.actor(), r.PathValue("box"), port)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	http.Redirect(w, r, strings.TrimRight(base, "/")+previewOpenPath+"?t="+url.QueryEscape(t.Token), http.StatusSeeOther)
}

// pageCSP is the console pages' CSP: the seed's, with the preview origin
// allowed as a form target (the preview form's redirect goes there, and
// form-action governs redirects too).
func (s *Server) pageCSP() string {
	if s.PreviewURL == nil {
		return consoleCSP
	}
	u, err := url.Parse(s.PreviewURL())
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return consoleCSP
	}
	return strings.Replace(consoleCSP, "form-action 'self'", "form-action 'self' "+u.Scheme+"://"+u.Host, 1)
}

// PreviewOptions configures the preview handler.
type PreviewOptions struct {
	Fleet  *fleet.Fleet
	Logger *slog.Logger
	// Secure marks the preview cookie Secure (the preview origin is https).
	Secure bool
	// TrustedProxies may set X-Forwarded-For (for the audit rows).
	TrustedProxies []netip.Prefix
}

type previewSessionKey struct{}

// Preview is the handler of the preview listener.
func Preview(o PreviewOptions) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &preview{PreviewOptions: o}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			sess, _ := pr.In.Context().Value(previewSessionKey{}).(previewSession)
			// One connection pool per preview session: a connection is
			// the session's own (its user, its box and port).
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = sess.pool
			pr.Out.Host = "localhost:" + strconv.Itoa(sess.port)
			pr.Out.Header.Del("Cookie") // the console's session among them
			pr.Out.Header.Del("Proxy-Authorization")
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				sess, ok := ctx.Value(previewSessionKey{}).(previewSession)
				if !ok {
					return nil, errors.New("preview: no session")
				}
				return o.Fleet.DialPreview(ctx, sess.token, sess.addr)
			},
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: 5 * time.Minute,
			ForceAttemptHTTP2:     false,
		},
		ModifyResponse: func(resp *http.Response) error {
			h := resp.Header
			for _, k := range []string{"Set-Cookie", "Set-Cookie2", "Strict-Transport-Security", "Clear-Site-Data", "Alt-Svc"} {
				h.Del(k)
			}
			previewHeaders(h)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			code := http.StatusBadGateway
			msg := "the box's port did not answer"
			if errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrForbidden) || errors.Is(err, fleet.ErrConflict) ||
				errors.Is(err, fleet.ErrUnavailable) || errors.Is(err, fleet.ErrInvalid) {
				msg = innermost(err) // the core's own message, already redacted
			}
			o.Logger.Info("preview proxy", "path", r.URL.Path, "err", err)
			previewText(w, code, msg)
		},
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return p
}

// innermost is the core's message inside the transport's wrapping (a dial
// error reaches ErrorHandler as *net.OpError or url.Error around it).
func innermost(err error) string {
	for {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
			continue
		}
		return err.Error()
	}
}

type preview struct {
	PreviewOptions
	proxy *httputil.ReverseProxy
}

// previewSession is one request's checked session.
type previewSession struct {
	token, addr, pool string
	port              int
}

func (p *preview) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == previewOpenPath {
		p.open(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/.sbx/") {
		previewText(w, http.StatusNotFound, "not found")
		return
	}
	c, err := r.Cookie(PreviewCookie)
	if err != nil {
		previewText(w, http.StatusForbidden, "no preview here: open one from the box page (Preview port)")
		return
	}
	_, port, err := p.Fleet.PreviewOf(c.Value)
	if err != nil {
		previewText(w, http.StatusForbidden, err.Error())
		return
	}
	sum := sha256.Sum256([]byte(c.Value))
	sess := previewSession{
		token: c.Value, port: port,
		addr: throttle.ClientAddr(r.RemoteAddr, r.Header.Get("X-Forwarded-For"), p.TrustedProxies),
		pool: "s" + hex.EncodeToString(sum[:10]) + ".preview.invalid",
	}
	p.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), previewSessionKey{}, sess)))
}

// open spends a link for the preview cookie, then moves on to / by a
// refresh from this origin's own page: a SameSite=Strict cookie set during
// a redirect chain that began on another site would not be sent on the
// chain's next step.
func (p *preview) open(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		previewText(w, http.StatusMethodNotAllowed, "GET only")
		return
	}
	pv, err := p.Fleet.OpenPreview(r.Context(), r.URL.Query().Get("t"))
	if err != nil {
		code := http.StatusForbidden
		if errors.Is(err, fleet.ErrUnavailable) {
			code = http.StatusServiceUnavailable
		}
		previewText(w, code, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: PreviewCookie, Value: pv.Session, Path: "/", HttpOnly: true, Secure: p.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(fleet.PreviewSessionTTL / time.Second),
	})
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", openPageCSP)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	title := html.EscapeString(fmt.Sprintf("port %d of box %s", pv.Port, pv.Box))
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/"><title>Preview of %s</title></head>`+
		`<body><p>Opening the preview of %s… <a href="/">Continue</a></p></body></html>`, title, title)
}

// previewHeaders are on every answer of the preview origin.
func previewHeaders(h http.Header) {
	h.Add("Content-Security-Policy", PreviewCSP) // with the box's own, if any: both apply
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// previewText is the gateway's own short answer on the preview origin.
func previewText(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", openPageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
