package redact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// minSecret is the shortest known secret matched exactly. Shorter ones
	// would shred ordinary text ("admin", "1234"); they are counted and
	// logged, and the credential patterns still apply to them.
	minSecret = 6
	// maxSecret is the longest single-line known secret; longer lines are
	// not credentials and would bloat the automaton.
	maxSecret = 16 << 10
	// DefaultRefresh is how old the known-secret list may get before a
	// read triggers a background reload.
	DefaultRefresh = 60 * time.Second
)

// Source returns every secret the gateway currently holds (tokens, MCP
// env and header values, API keys, session material, anything sealed).
type Source func(ctx context.Context) ([]string, error)

// Options tunes a Redactor. The zero value is ready to use.
type Options struct {
	Refresh time.Duration    // reload period; DefaultRefresh when 0
	Timeout time.Duration    // bound on one background reload; 30 s when 0
	Now     func() time.Time // clock; time.Now when nil
	Logger  *slog.Logger     // slog.Default() when nil
}

// Redactor replaces known secrets and credential-shaped text. It is safe for
// concurrent use; reads never wait for a reload. The zero value redacts the
// credential patterns only.
type Redactor struct {
	source  Source
	refresh time.Duration
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger

	cur        atomic.Pointer[automaton]
	next       atomic.Int64 // unix nanos when the next background reload is due
	refreshing atomic.Bool
	reload     chan struct{} // a one-slot semaphore: serialises reloads, honours ctx
	short      int           // secrets too short at the last reload (guarded by reload)
}

// New loads the known secrets once and returns a Redactor that reloads them
// lazily. A nil source means patterns only. If the first load fails New
// returns the error rather than a Redactor that would miss every known
// secret.
func New(ctx context.Context, source Source, opts Options) (*Redactor, error) {
	r := &Redactor{source: source, refresh: opts.Refresh, timeout: opts.Timeout, now: opts.Now, log: opts.Logger,
		reload: make(chan struct{}, 1)}
	if r.refresh <= 0 {
		r.refresh = DefaultRefresh
	}
	if r.timeout <= 0 {
		r.timeout = 30 * time.Second
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Refresh reloads the known secrets now (call it right after a secret is
// added, so it is redacted at once). On error the previous list stays.
func (r *Redactor) Refresh(ctx context.Context) error {
	if r.reload == nil {
		return errors.New("redact: Refresh on a Redactor not made by New")
	}
	select {
	case r.reload <- struct{}{}:
		defer func() { <-r.reload }()
	case <-ctx.Done():
		return fmt.Errorf("load known secrets: waiting for the reload in progress: %w", ctx.Err())
	}
	var list []string
	if r.source != nil {
		var err error
		list, err = r.source(ctx)
		if err != nil {
			r.next.Store(r.now().Add(r.retry()).UnixNano())
			return fmt.Errorf("load known secrets: %w", err)
		}
	}
	secrets, short := normalize(list)
	if short > 0 && short != r.short {
		// Once per change, not on every reload.
		r.log.Warn("redact: known secrets too short to match exactly; only the credential patterns cover them",
			"count", short, "min_bytes", minSecret)
	}
	r.short = short
	if n := tableSize(secrets, triggerTexts()); n > maxTable {
		r.next.Store(r.now().Add(r.refresh).UnixNano())
		return fmt.Errorf("load known secrets: %d secrets would need a %d MiB matcher (limit %d MiB)",
			len(secrets), n>>20, maxTable>>20)
	}
	r.cur.Store(compile(secrets, triggerTexts()))
	r.next.Store(r.now().Add(r.refresh).UnixNano())
	r.log.Debug("redact: known secrets loaded", "count", len(secrets))
	return nil
}

// retry is how soon a failed reload is tried again.
func (r *Redactor) retry() time.Duration { return min(r.refresh, 10*time.Second) }

// Known returns how many distinct secret strings are matched exactly.
func (r *Redactor) Known() int { return r.current().secrets }

// current returns the automaton to use now, starting a background reload
// when the list is due. It never waits for one.
func (r *Redactor) current() *automaton {
	a := r.cur.Load()
	if a == nil {
		return patternsOnly() // the zero Redactor
	}
	if r.source != nil && r.now().UnixNano() >= r.next.Load() && r.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer r.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
			defer cancel()
			if err := r.Refresh(ctx); err != nil {
				r.log.Warn("redact: reload failed; keeping the previous known secrets", "err", err)
			}
		}()
	}
	return a
}

// patternsOnly is the automaton of a Redactor without known secrets.
var patternsOnly = sync.OnceValue(func() *automaton { return compile(nil, triggerTexts()) })

// normalize splits multi-line secrets into lines (the stream decides at
// line ends, and a PEM body is covered by key mode anyway), trims them,
// drops duplicates and counts the lines too short to match.
func normalize(list []string) (secrets [][]byte, short int) {
	seen := map[string]bool{}
	for _, s := range list {
		for _, line := range bytes.FieldsFunc([]byte(s), func(r rune) bool { return r == '\n' || r == '\r' }) {
			line = bytes.TrimSpace(line)
			switch {
			case len(line) == 0:
			case len(line) < minSecret:
				short++
			case len(line) > maxSecret:
				// Keep the head: a match on it still hides the start.
				line = line[:maxSecret]
				fallthrough
			default:
				if !seen[string(line)] {
					seen[string(line)] = true
					secrets = append(secrets, line)
				}
			}
		}
	}
	return secrets, short
}

// String redacts s.
func (r *Redactor) String(s string) Safe {
	out, changed := r.current().redact([]byte(s))
	if !changed {
		return Safe{s}
	}
	return Safe{string(out)}
}

// Bytes redacts b.
func (r *Redactor) Bytes(b []byte) Safe {
	out, _ := r.current().redact(b)
	return Safe{string(out)}
}

// Contains reports whether b holds anything the redactor would replace.
func (r *Redactor) Contains(b []byte) bool {
	spans, _, key := r.current().scan(b, nil, true, false, &scratch{})
	return key >= 0 || len(spans) > 0
}

// Error returns err with a redacted message. errors.Is still sees the
// original chain; errors.As and Unwrap do not, so no caller can reach the
// unredacted text through it.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	return &Error{msg: r.String(err.Error()), err: err}
}

// Error is an error whose message has passed a Redactor.
type Error struct {
	msg Safe
	err error
}

func (e *Error) Error() string { return e.msg.s }

// Safe returns the redacted message.
func (e *Error) Safe() Safe { return e.msg }

// Is lets errors.Is match the original error chain.
func (e *Error) Is(target error) bool { return errors.Is(e.err, target) }
