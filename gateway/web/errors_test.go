package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

// TestFailAnswersByKind: the API and the console answer every layer's
// errors by kind (a sentinel of errkind.New stands for vm's, which fronts do
// not import), with the error's own message; an error of no kind is 500
// "internal error", logged and not shown.
func TestFailAnswersByKind(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("box %q: %w", "b", fleet.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("user %q: %w", "u", keys.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("box %q: %w", "b", errkind.New(errkind.NotFound, "no such box")), http.StatusNotFound},
		{fmt.Errorf("task: empty: %w", fleet.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("role %q: %w", "x", keys.ErrInvalid), http.StatusBadRequest},
		{fmt.Errorf("pool: %w", fleet.ErrForbidden), http.StatusForbidden},
		{fmt.Errorf("%w: write", fleet.ErrScope), http.StatusForbidden},
		{fmt.Errorf("revoke: %w", keys.ErrForbidden), http.StatusForbidden},
		{fmt.Errorf("disable ada: %w", keys.ErrLastAdmin), http.StatusForbidden},
		{fmt.Errorf("user %q: %w", "u", keys.ErrDisabled), http.StatusForbidden},
		{fmt.Errorf("answer: %w", fleet.ErrConflict), http.StatusConflict},
		{fmt.Errorf("user %q: %w", "u", keys.ErrExists), http.StatusConflict},
		{fmt.Errorf("box %q: %w: it is sleeping", "b", errkind.New(errkind.Conflict, "wrong box state")), http.StatusConflict},
		{fmt.Errorf("max boxes: %w", fleet.ErrLimit), http.StatusTooManyRequests},
		{fmt.Errorf("%w: %w", fleet.ErrLimit, errkind.New(errkind.Limit, "host limit reached")), http.StatusTooManyRequests},
		{fmt.Errorf("git host: %w", fleet.ErrUnavailable), http.StatusServiceUnavailable},
		{errkind.New(errkind.Unavailable, "manager closed"), http.StatusServiceUnavailable},
	} {
		for _, page := range []bool{false, true} {
			code, body, logged := failWith(t, page, tc.err)
			if code != tc.status || !strings.Contains(body, tc.err.Error()) {
				t.Errorf("page=%v %q: %d %s, want %d and the message", page, tc.err, code, body, tc.status)
			}
			if logged != "" {
				t.Errorf("page=%v %q: logged %s", page, tc.err, logged)
			}
		}
	}
	const secret = "secret-detail-42"
	for _, err := range []error{errors.New(secret), fmt.Errorf("save: %w", errors.New(secret)), fmt.Errorf("%s: %w", secret, context.Canceled)} {
		for _, page := range []bool{false, true} {
			code, body, logged := failWith(t, page, err)
			if code != http.StatusInternalServerError || !strings.Contains(body, "internal error") || strings.Contains(body, secret) {
				t.Errorf("page=%v %q: %d %s, want 500 internal error", page, err, code, body)
			}
			if !strings.Contains(logged, secret) {
				t.Errorf("page=%v %q: not logged: %q", page, err, logged)
			}
		}
	}
}

// failWith answers err as the API (fail) or the console (failPage) does and
// returns the status, the body as text (the JSON error's message, the page
// unescaped) and what was logged.
func failWith(t *testing.T, page bool, err error) (int, string, string) {
	t.Helper()
	var log bytes.Buffer
	ctx := context.WithValue(context.Background(), loggerKey, slog.New(slog.NewTextHandler(&log, nil)))
	r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
	rec := httptest.NewRecorder()
	s := &Server{}
	if page {
		s.failPage(rec, r, err)
		return rec.Code, html.UnescapeString(rec.Body.String()), log.String()
	}
	s.fail(rec, r, err)
	var body errorBody
	if jerr := json.Unmarshal(rec.Body.Bytes(), &body); jerr != nil {
		t.Fatalf("%q: body %s: %v", err, rec.Body, jerr)
	}
	return rec.Code, body.Error, log.String()
}
