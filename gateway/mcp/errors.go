package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
)

// errorBody is every HTTP error answer, the same shape as the HTTP API's.
type errorBody struct {
	Error     string `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// TODO(web): the HTTP API's writeError/retryAfter are unexported; these
// copies keep the two fronts' error bodies identical until web exports them.
// The request id is the one the outer middleware put on the response.
func writeError(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(errorBody{Error: msg, RequestID: w.Header().Get("X-Request-Id")})
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(d, time.Second).Seconds()))))
}

// toolError is a failure the calling agent can act on: what was wrong and
// what to do. The text of a core error is already redacted and is shown as
// is.
type toolError struct {
	msg    string
	result string // audit result
	err    error
}

func (e *toolError) Error() string { return e.msg }
func (e *toolError) Unwrap() error { return e.err }

// invalid is bad input caught by this front before the core.
func invalid(msg string) error {
	return &toolError{msg: msg + ". Fix the argument and call again.", result: audit.ResultError, err: fleet.ErrInvalid}
}

// explain turns an error from the core into a tool error with a next step.
func explain(err error) *toolError {
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	msg := err.Error()
	result := audit.ResultError
	switch kind := errkind.Of(err); {
	case errors.Is(err, fleet.ErrNoPR):
		msg += ". Open one with pr_open first."
	case errors.Is(err, fleet.ErrNoAccount):
		msg += ". The operator adds accounts with `account add`; leave account empty for the default one."
	case kind == errkind.NotFound && errors.Is(err, fs.ErrNotExist):
		msg += ". No such file or directory in the box: call list_artifacts to see what is there."
	case kind == errkind.NotFound:
		msg += ". No box of yours has that name: call list to see your boxes."
	case kind == errkind.Invalid:
		msg += ". Fix the argument and call again."
	case kind == errkind.Limit:
		msg += ". Tear down (teardown) or sleep boxes you no longer need (list shows them), then retry."
		result = audit.ResultDenied
	case kind == errkind.Conflict:
		msg += ". The box or its pull request is not in a state that allows this: call status (or pr_get) to see it, and retry when it has changed."
	case errors.Is(err, fleet.ErrScope):
		// Its message already names the scope to ask for.
		result = audit.ResultDenied
	case kind == errkind.Forbidden:
		msg += ". Your role may not do this; ask an admin."
		result = audit.ResultDenied
	case kind == errkind.Unavailable:
		msg += ". A dependency failed; retry in a minute, and if it persists tell the operator."
	case errors.Is(err, context.DeadlineExceeded):
		msg = "timed out: " + msg + ". Retry; for a long run call status or watch instead of waiting."
	case errors.Is(err, context.Canceled):
		msg = "canceled: " + msg
	default:
		msg += ". Retry later; if it persists tell the operator."
	}
	return &toolError{msg: msg, result: result, err: err}
}
