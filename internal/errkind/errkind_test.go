package errkind_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm"
)

// TestStatus is the whole mapping: every kind, every layer's sentinel, the
// ways errors get wrapped on their way to a front, and errors of no kind.
func TestStatus(t *testing.T) {
	var red redact.Redactor // the zero value redacts patterns only
	for _, tc := range []struct {
		name   string
		err    error
		kind   *errkind.Kind
		status int
	}{
		{"not found", errkind.NotFound, errkind.NotFound, http.StatusNotFound},
		{"invalid", errkind.Invalid, errkind.Invalid, http.StatusBadRequest},
		{"forbidden", errkind.Forbidden, errkind.Forbidden, http.StatusForbidden},
		{"conflict", errkind.Conflict, errkind.Conflict, http.StatusConflict},
		{"limit", errkind.Limit, errkind.Limit, http.StatusTooManyRequests},
		{"unavailable", errkind.Unavailable, errkind.Unavailable, http.StatusServiceUnavailable},

		{"fleet not found", fleet.ErrNotFound, errkind.NotFound, http.StatusNotFound},
		{"fleet invalid", fleet.ErrInvalid, errkind.Invalid, http.StatusBadRequest},
		{"fleet forbidden", fleet.ErrForbidden, errkind.Forbidden, http.StatusForbidden},
		{"fleet scope", fleet.ErrScope, errkind.Forbidden, http.StatusForbidden},
		{"fleet conflict", fleet.ErrConflict, errkind.Conflict, http.StatusConflict},
		{"fleet limit", fleet.ErrLimit, errkind.Limit, http.StatusTooManyRequests},
		{"fleet unavailable", fleet.ErrUnavailable, errkind.Unavailable, http.StatusServiceUnavailable},

		{"keys not found", keys.ErrNotFound, errkind.NotFound, http.StatusNotFound},
		{"keys invalid", keys.ErrInvalid, errkind.Invalid, http.StatusBadRequest},
		{"keys exists", keys.ErrExists, errkind.Conflict, http.StatusConflict},
		{"keys forbidden", keys.ErrForbidden, errkind.Forbidden, http.StatusForbidden},
		{"keys last admin", keys.ErrLastAdmin, errkind.Forbidden, http.StatusForbidden},
		{"keys disabled", keys.ErrDisabled, errkind.Forbidden, http.StatusForbidden},

		{"vm not found", vm.ErrNotFound, errkind.NotFound, http.StatusNotFound},
		{"vm exists", vm.ErrExists, errkind.Conflict, http.StatusConflict},
		{"vm state", vm.ErrState, errkind.Conflict, http.StatusConflict},
		{"vm limit", vm.ErrLimit, errkind.Limit, http.StatusTooManyRequests},
		{"vm closed", vm.ErrClosed, errkind.Unavailable, http.StatusServiceUnavailable},

		{"wrapped", fmt.Errorf("box %q: %w", "b", fleet.ErrNotFound), errkind.NotFound, http.StatusNotFound},
		{"wrapped twice", fmt.Errorf("delegate: %w", fmt.Errorf("user %q: %w", "u", keys.ErrExists)), errkind.Conflict, http.StatusConflict},
		{"redacted", red.Error(fmt.Errorf("box %q: %w", "b", vm.ErrState)), errkind.Conflict, http.StatusConflict},
		{"joined with a plain error", fmt.Errorf("lock: %w: %w", errors.New("db down"), fleet.ErrUnavailable), errkind.Unavailable, http.StatusServiceUnavailable},
		// Of several kinds the most specific wins, Unavailable says least.
		{"unavailable over not found", fmt.Errorf("repo: %w: %w", fleet.ErrUnavailable, keys.ErrNotFound), errkind.NotFound, http.StatusNotFound},
		{"unavailable over conflict", fmt.Errorf("%w: %w", fleet.ErrUnavailable, vm.ErrExists), errkind.Conflict, http.StatusConflict},
		{"limit over limit", fmt.Errorf("%w: %w", fleet.ErrLimit, vm.ErrLimit), errkind.Limit, http.StatusTooManyRequests},

		{"plain", errors.New("disk on fire"), nil, http.StatusInternalServerError},
		{"wrapped plain", fmt.Errorf("save: %w", errors.New("disk on fire")), nil, http.StatusInternalServerError},
		{"canceled", fmt.Errorf("run: %w", context.Canceled), nil, http.StatusInternalServerError},
		{"bad token", keys.ErrBadToken, nil, http.StatusInternalServerError},
		{"no session", keys.ErrNoSession, nil, http.StatusInternalServerError},
		{"bad login", keys.ErrBadLogin, nil, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errkind.Of(tc.err); got != tc.kind {
				t.Errorf("Of(%q) = %v, want %v", tc.err, got, tc.kind)
			}
			if got := errkind.HTTPStatus(tc.err); got != tc.status {
				t.Errorf("HTTPStatus(%q) = %d, want %d", tc.err, got, tc.status)
			}
		})
	}
}

// TestMessages: wrapping a kind changes no message a user reads.
func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fleet.ErrNotFound, "not found"},
		{fleet.ErrInvalid, "invalid"},
		{fleet.ErrLimit, "limit reached"},
		{fleet.ErrConflict, "conflict"},
		{fleet.ErrForbidden, "forbidden"},
		{fleet.ErrScope, "api key scope: forbidden"},
		{fleet.ErrUnavailable, "unavailable"},
		{keys.ErrNotFound, "not found"},
		{keys.ErrExists, "already exists"},
		{keys.ErrLastAdmin, "refused: it would leave no enabled admin"},
		{keys.ErrForbidden, "permission denied"},
		{keys.ErrInvalid, "invalid"},
		{keys.ErrDisabled, "user is disabled"},
		{vm.ErrNotFound, "no such box"},
		{vm.ErrExists, "box already exists"},
		{vm.ErrState, "wrong box state"},
		{vm.ErrLimit, "host limit reached"},
		{vm.ErrClosed, "manager closed"},
		{fmt.Errorf("box %q: %w: no machine running", "b", vm.ErrState), `box "b": wrong box state: no machine running`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("message %q, want %q", got, tc.want)
		}
	}
}

// TestSentinelsStayApart: a layer's sentinel is of its kind, not the same
// error as another layer's sentinel of that kind.
func TestSentinelsStayApart(t *testing.T) {
	err := fmt.Errorf("box %q: %w", "b", vm.ErrState)
	if !errors.Is(err, vm.ErrState) || !errors.Is(err, errkind.Conflict) || !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("%v: want vm.ErrState, of kind conflict", err)
	}
	if errors.Is(err, vm.ErrExists) || errors.Is(err, keys.ErrExists) {
		t.Errorf("%v: matches another sentinel of its kind", err)
	}
}

// TestExitCode is the whole exit-code table (README's "Exit codes"): a
// code per kind, all distinct and clear of 0 and 1, and a wrapped or
// redacted error exits with its kind's.
func TestExitCode(t *testing.T) {
	var red redact.Redactor
	want := map[*errkind.Kind]int{
		errkind.Invalid: 2, errkind.NotFound: 3, errkind.Forbidden: 4,
		errkind.Conflict: 5, errkind.Limit: 6, errkind.Unavailable: 7,
	}
	seen := map[int]*errkind.Kind{}
	for k, code := range want {
		if got := k.ExitCode(); got != code {
			t.Errorf("%v.ExitCode() = %d, want %d", k, got, code)
		}
		if other, dup := seen[code]; dup {
			t.Errorf("%v and %v share exit code %d", k, other, code)
		}
		seen[code] = k
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("disk on fire"), 1},
		{fmt.Errorf("run: %w", context.Canceled), 1},
		{fmt.Errorf("box %q: %w", "b", fleet.ErrNotFound), 3},
		{red.Error(fmt.Errorf("box %q: %w", "b", vm.ErrState)), 5},
		{fmt.Errorf("user ls: admins only: %w", keys.ErrForbidden), 4},
		{fmt.Errorf("repo: %w: %w", fleet.ErrUnavailable, keys.ErrNotFound), 3},
		{vm.ErrClosed, 7},
		{vm.ErrLimit, 6},
		{keys.ErrInvalid, 2},
	} {
		if got := errkind.ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
