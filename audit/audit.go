// Package audit records every state-changing action as a row in the store and
// as an [audit] structured log line, so an operator can answer "who did what,
// from where, and did it work" after the fact.
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// Results of an audited action.
const (
	ResultOK     = "ok"
	ResultDenied = "denied" // refused by a rule: permission, last admin, throttle
	ResultError  = "error"  // failed: bad input, not found, storage error
)

// Entry is one audited action.
type Entry struct {
	ID     int64
	Time   time.Time
	Actor  string // user name of whoever acted ("" when unknown)
	Front  string // "ssh", "http", "mcp", "cli"
	Action string // e.g. "user.add", "key.rm", "apikey.create"
	Target string // what was acted on, e.g. a user name or key fingerprint
	Addr   string // source address of the actor
	Result string // ResultOK, ResultDenied or ResultError
	Detail string // free text: the error, the key type, ...
}

// Filter narrows List. Zero values mean "no restriction"; Limit <= 0 means
// DefaultLimit.
type Filter struct {
	User  string // rows whose actor is this user
	Since time.Time
	Limit int
}

// DefaultLimit and MaxLimit bound how many rows List returns.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

// Store is the storage audit needs; store.Store implements it (both
// dialects).
type Store interface {
	InsertAudit(ctx context.Context, e Entry) (int64, error)
	ListAudit(ctx context.Context, f Filter) ([]Entry, error)
}

// Log writes audit entries to a Store and to a slog.Logger.
type Log struct {
	store  Store
	logger *slog.Logger
	now    func() time.Time
	// redact cleans an entry's free text (target, detail) of secrets: rows
	// can quote what came from a box (an error, a host name).
	redact atomic.Pointer[func(string) string]
}

// Redact makes every entry's target and detail pass fn when it is logged,
// recorded or listed, so no audit view can show a secret (the redactor is
// built after the Log, since it reads secrets through services that audit).
func (l *Log) Redact(fn func(string) string) { l.redact.Store(&fn) }

func (l *Log) clean(e Entry) Entry {
	if fn := l.redact.Load(); fn != nil {
		e.Target, e.Detail = (*fn)(e.Target), (*fn)(e.Detail)
	}
	return e
}

// New returns a Log over store. A nil logger means slog.Default(); a nil now
// means time.Now.
func New(store Store, logger *slog.Logger, now func() time.Time) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return &Log{store: store, logger: logger, now: now}
}

// Record writes e as an [audit] log line and a row. The log line is written
// first so that even a failing store leaves a trace. A zero e.Time is set to
// the clock's now.
func (l *Log) Record(ctx context.Context, e Entry) error {
	e = l.normalize(e)
	l.Line(ctx, e)
	if l.store == nil {
		return errors.New("audit: no store")
	}
	if _, err := l.store.InsertAudit(ctx, e); err != nil {
		l.logger.LogAttrs(ctx, slog.LevelError, "audit row not written",
			slog.String("action", e.Action), slog.Any("err", err))
		return fmt.Errorf("write audit row %s: %w", e.Action, err)
	}
	return nil
}

// Field bounds applied by Clean.
const (
	maxField  = 256
	maxDetail = 2048
)

// Clean makes e safe to show on a terminal or a page: control characters
// (terminal escapes) and invalid UTF-8 become '?', and fields are bounded.
// Targets and details often carry what a client typed. Stores call it on
// every row they write.
func Clean(e Entry) Entry {
	for _, f := range []*string{&e.Actor, &e.Front, &e.Action, &e.Target, &e.Addr, &e.Result} {
		*f = clean(*f, maxField)
	}
	e.Detail = clean(e.Detail, maxDetail)
	return e
}

func clean(s string, max int) string {
	s = Printable(s)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// Printable replaces control characters (terminal escapes would reach whoever
// lists the text over SSH) and invalid UTF-8 with '?'. Untrusted text shown
// on a terminal goes through it.
func Printable(s string) string {
	s = strings.ToValidUTF8(s, "?")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}

func (l *Log) normalize(e Entry) Entry {
	e = Clean(l.clean(e))
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	e.Time = e.Time.UTC()
	if e.Result == "" {
		e.Result = ResultOK
	}
	return e
}

// Line writes only the [audit] log line for e. Use it for an entry whose row
// the store already committed in the same transaction as the change it
// describes, so a crash can never keep the change and lose its row.
func (l *Log) Line(ctx context.Context, e Entry) {
	e = l.normalize(e)
	level := slog.LevelInfo
	if e.Result != ResultOK {
		level = slog.LevelWarn
	}
	l.logger.LogAttrs(ctx, level, "[audit]",
		slog.String("actor", e.Actor),
		slog.String("front", e.Front),
		slog.String("action", e.Action),
		slog.String("target", e.Target),
		slog.String("addr", e.Addr),
		slog.String("result", e.Result),
		slog.String("detail", e.Detail),
		slog.Time("at", e.Time),
	)
}

// Finish completes e once its action is over. On success the store already
// committed the row in the same transaction as the change, so only the log
// line is left; on failure nothing changed and the row records why, with the
// caller's classification of err (ResultDenied or ResultError). A failing
// audit write is logged and does not change the action's outcome. A nil Log
// does nothing.
func (l *Log) Finish(ctx context.Context, e Entry, err error, result string) {
	if l == nil {
		return
	}
	if err == nil {
		l.Line(ctx, e)
		return
	}
	e.Result = result
	e.Detail = strings.TrimSpace(e.Detail + " " + err.Error())
	_ = l.Record(ctx, e)
}

// List returns entries matching f, newest first.
func (l *Log) List(ctx context.Context, f Filter) ([]Entry, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultLimit
	}
	if f.Limit > MaxLimit {
		f.Limit = MaxLimit
	}
	entries, err := l.store.ListAudit(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list audit rows: %w", err)
	}
	for i := range entries {
		entries[i] = l.clean(entries[i])
	}
	return entries, nil
}
