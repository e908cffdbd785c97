package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"
)

// CSP is the Content-Security-Policy on every response (the seed's list).
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// PermissionsPolicy denies the device and tracking APIs no page of ours uses.
// Only features Chromium knows: an unknown one is a console error on every
// page (ambient-light-sensor, battery and bluetooth were; the browser test
// fails on any such security log entry).
const PermissionsPolicy = "accelerometer=(), autoplay=(), camera=(), display-capture=(), geolocation=(), gyroscope=(), hid=(), interest-cohort=(), magnetometer=(), microphone=(), midi=(), payment=(), serial=(), usb=(), xr-spatial-tracking=()"

// HSTS is sent only when the gateway itself serves TLS.
const HSTS = "max-age=31536000; includeSubDomains"

// RequestIDHeader carries the request id on every response.
const RequestIDHeader = "X-Request-Id"

type ctxKey int

const (
	requestIDKey ctxKey = iota
	loggerKey
	callerKey
	bodyLimitKey
)

// RequestID returns the id given to the request by the outer middleware.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// Logger returns the request-scoped logger (it carries the request id).
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// LogHandler adds the request id carried by a record's context, so lines
// written deep in the core (the [audit] lines) name the HTTP request too.
// Log with the *Context methods to benefit.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(ctxHandler); ok {
		return h
	}
	return ctxHandler{h}
}

type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h ctxHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ctxHandler{h.Handler.WithAttrs(as)}
}

func (h ctxHandler) WithGroup(name string) slog.Handler {
	return ctxHandler{h.Handler.WithGroup(name)}
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥1.24)
	return hex.EncodeToString(b[:])
}

// setSecurityHeaders writes the headers every response carries, before the
// handler runs, so 404s, 405s, errors and panics carry them too.
func setSecurityHeaders(h http.Header, tls bool) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Permissions-Policy", PermissionsPolicy)
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if tls {
		h.Set("Strict-Transport-Security", HSTS)
	}
}

// statusWriter remembers the status code for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	status  int
	written int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines (SSE later).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// outer is the first middleware: request id, security headers, recover,
// access log and metrics. route reports the matched pattern for labels.
func (s *Server) outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := newRequestID()
		setSecurityHeaders(w.Header(), r.TLS != nil)
		w.Header().Set(RequestIDHeader, id)
		logger := s.log
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		ctx = context.WithValue(ctx, loggerKey, logger)
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}
		route := s.route(r)

		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				logger.ErrorContext(ctx, "http handler panic", "method", r.Method, "path", r.URL.Path,
					"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, r, http.StatusInternalServerError, "internal error")
				}
			}
			if sw.status == 0 {
				sw.status = http.StatusOK
			}
			s.metrics.HTTPRequest(route, sw.status)
			logger.InfoContext(ctx, "http request", "method", r.Method, "path", r.URL.Path, "route", route,
				"status", sw.status, "bytes", sw.written, "duration", time.Since(start),
				"client", s.clientAddr(r))
		}()
		next.ServeHTTP(sw, r)
	})
}
