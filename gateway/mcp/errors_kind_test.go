package mcp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
)

// TestExplainByKind: a tool error says what to do next by the error's kind,
// whichever layer made it (a sentinel of errkind.New stands for vm's, which
// fronts do not import), and keeps the error's own message in front.
func TestExplainByKind(t *testing.T) {
	for _, tc := range []struct {
		err    error
		next   string
		result string
	}{
		{fmt.Errorf("box %q: %w", "b", fleet.ErrNotFound), "call list to see your boxes", audit.ResultError},
		{fmt.Errorf("box %q: %w", "b", errkind.New(errkind.NotFound, "no such box")), "call list to see your boxes", audit.ResultError},
		{fmt.Errorf("%w: %w", fleet.ErrNotFound, fs.ErrNotExist), "call list_artifacts", audit.ResultError},
		{fmt.Errorf("task: %w", fleet.ErrInvalid), "Fix the argument", audit.ResultError},
		{fmt.Errorf("repo: %w", keys.ErrInvalid), "Fix the argument", audit.ResultError},
		{fmt.Errorf("max boxes: %w", fleet.ErrLimit), "Tear down (teardown) or sleep boxes", audit.ResultDenied},
		{fmt.Errorf("%w: %w", fleet.ErrLimit, errkind.New(errkind.Limit, "host limit reached")), "Tear down (teardown) or sleep boxes", audit.ResultDenied},
		{fmt.Errorf("answer: %w", fleet.ErrConflict), "call status (or pr_get) to see it", audit.ResultError},
		{fmt.Errorf("box %q: %w", "b", errkind.New(errkind.Conflict, "wrong box state")), "call status (or pr_get) to see it", audit.ResultError},
		{fmt.Errorf("pool: %w", fleet.ErrForbidden), "ask an admin", audit.ResultDenied},
		{fmt.Errorf("accounts: %w", keys.ErrForbidden), "ask an admin", audit.ResultDenied},
		{fmt.Errorf("clone: %w", fleet.ErrUnavailable), "A dependency failed", audit.ResultError},
		{errkind.New(errkind.Unavailable, "manager closed"), "A dependency failed", audit.ResultError},
		{fmt.Errorf("run: %w", context.DeadlineExceeded), "Retry; for a long run", audit.ResultError},
		{errors.New("disk on fire"), "Retry later", audit.ResultError},
	} {
		te := explain(tc.err)
		if !strings.Contains(te.msg, tc.err.Error()) || !strings.Contains(te.msg, tc.next) || te.result != tc.result {
			t.Errorf("explain(%q) = %q (%s), want %q after the message (%s)", tc.err, te.msg, te.result, tc.next, tc.result)
		}
		if !errors.Is(te, tc.err) {
			t.Errorf("explain(%q) lost the error", tc.err)
		}
	}
	// A missing scope's message names the scope already: no hint, denied.
	err := fmt.Errorf("%w: delegate needs write", fleet.ErrScope)
	if te := explain(err); te.msg != err.Error() || te.result != audit.ResultDenied {
		t.Errorf("explain(%q) = %q (%s)", err, te.msg, te.result)
	}
}
