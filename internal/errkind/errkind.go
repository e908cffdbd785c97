// Package errkind is the one vocabulary of failure: the few kinds of error
// every layer's errors wrap (keys, fleet, vm) and every front answers.
// A layer keeps its own sentinels and messages (vm.ErrState reads "wrong
// box state"); what a front needs — the status it answers, the next step it
// suggests — depends on the kind alone, looked up by Of.
//
// Failed authentication (a bad API key, an ended session, a spent login
// link) has no kind: each front answers it where it checks the credential,
// in its own way (401 with a challenge, a redirect to /login, a refused SSH
// session).
//
// The package imports nothing but errors: the guest and every layer may
// use it.
package errkind

import "errors"

// Kind is one kind of failure. The kinds are errors themselves, so a layer
// may wrap one directly (fmt.Errorf("box %q: %w", name, errkind.NotFound))
// or give it a message of its own (New).
type Kind struct {
	msg    string
	name   string
	status int
	exit   int
}

func (k *Kind) Error() string { return k.msg }

// HTTPStatus is the status an HTTP front answers this kind with.
func (k *Kind) HTTPStatus() int { return k.status }

// Name is the kind's name for machines ("not_found"), as JSON errors carry it.
func (k *Kind) Name() string { return k.name }

// ExitCode is the status a command-line front exits with for this kind.
func (k *Kind) ExitCode() int { return k.exit }

// The kinds. Their messages are fleet's sentinels' (fleet.ErrNotFound is
// NotFound): what users read does not change. Status codes are written out
// so this package needs no net/http; the tests check them against it.
//
// Exit codes follow the POSIX habit of 2 for a wrong command line (Invalid
// covers bad values and, in the SSH front, bad usage) and give each other
// kind a small code of its own, so scripts can tell "no such box" from
// "try later"; 1 is every failure of no kind. README's "Exit codes" table
// is this one.
var (
	// NotFound: no such thing, or one the caller may not see (the two answer
	// identically, so existence never leaks).
	NotFound = &Kind{msg: "not found", name: "not_found", status: 404, exit: 3}
	// Invalid: bad input; fixing the argument may work.
	Invalid = &Kind{msg: "invalid", name: "invalid", status: 400, exit: 2}
	// Forbidden: the caller may not do it; asking an admin may help.
	Forbidden = &Kind{msg: "forbidden", name: "forbidden", status: 403, exit: 4}
	// Conflict: the thing is not in a state that allows it (taken name,
	// wrong box state).
	Conflict = &Kind{msg: "conflict", name: "conflict", status: 409, exit: 5}
	// Limit: a cap or quota refused it; freeing something may help.
	Limit = &Kind{msg: "limit reached", name: "limit", status: 429, exit: 6}
	// Unavailable: a dependency failed; retrying later may work.
	Unavailable = &Kind{msg: "unavailable", name: "unavailable", status: 503, exit: 7}
)

// byPrecedence decides an error that wraps several kinds: the most specific
// wins ("repo x: unavailable: account y: not found" is a not found), and
// Unavailable, which says least, comes last.
var byPrecedence = []*Kind{NotFound, Invalid, Forbidden, Conflict, Limit, Unavailable}

// Of returns err's kind, or nil when it has none (an unexpected failure,
// which fronts log and do not show). It goes by errors.Is, so errors whose
// Unwrap is hidden (redact.Error) are classified too.
func Of(err error) *Kind {
	if err == nil {
		return nil
	}
	for _, k := range byPrecedence {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// HTTPStatus is the status an HTTP front answers err with: its kind's, 500
// for an error of no kind.
func HTTPStatus(err error) int {
	if k := Of(err); k != nil {
		return k.HTTPStatus()
	}
	return 500
}

// Exit codes of no kind: success, and a failure no kind describes.
const (
	exitOK    = 0
	exitOther = 1
)

// ExitCode is the status a command-line front exits with for err: 0 for
// nil, its kind's code, 1 for an error of no kind.
func ExitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if k := Of(err); k != nil {
		return k.ExitCode()
	}
	return exitOther
}

// New returns a sentinel of kind k with a message of its own: errors.Is
// matches both the sentinel and k, and users read msg.
func New(k *Kind, msg string) error { return &sentinel{msg: msg, kind: k} }

type sentinel struct {
	msg  string
	kind *Kind
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.kind }
