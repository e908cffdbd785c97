package keys

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scope is one right an API key carries. The set is closed: a scope the
// gateway does not know is refused when a key is made, and grants nothing
// on a key stored by an older gateway.
type Scope string

const (
	// ScopeRead lets a key list and read the user's boxes: status, logs,
	// diffs, artifacts. Nothing it does changes a box.
	ScopeRead Scope = "read"
	// ScopeWrite lets a key do what read does and change boxes: delegate,
	// answer, sleep, wake, keep, destroy.
	ScopeWrite Scope = "write"
	// ScopeTokens lets a key list, create and revoke the user's API keys,
	// never beyond its own rights. No other scope implies it, so a key
	// leaked from a CI job cannot mint the attacker a lasting one.
	ScopeTokens Scope = "tokens"
)

// AllScopes is every scope, in the order they are shown.
var AllScopes = []Scope{ScopeRead, ScopeWrite, ScopeTokens}

// maxScopeArgs bounds the work of parsing a request's scope list.
const maxScopeArgs = 16

// DefaultScopes is what a key gets when its maker names none.
var DefaultScopes = []Scope{ScopeRead, ScopeWrite}

// Rights is a set of scopes, with write implying read.
type Rights uint8

const (
	RightRead Rights = 1 << iota
	RightWrite
	RightTokens
)

func (s Scope) right() Rights {
	switch s {
	case ScopeRead:
		return RightRead
	case ScopeWrite:
		return RightRead | RightWrite
	case ScopeTokens:
		return RightTokens
	}
	return 0
}

// Has reports whether every right in want is in r.
func (r Rights) Has(want Rights) bool { return r&want == want }

// Covers reports whether r holds every right of o: a key with r may make
// or revoke a key with o.
func (r Rights) Covers(o Rights) bool { return r&o == o }

// String lists the scopes r holds (write standing for read too).
func (r Rights) String() string {
	var out []string
	switch {
	case r.Has(RightWrite):
		out = append(out, string(ScopeWrite))
	case r.Has(RightRead):
		out = append(out, string(ScopeRead))
	}
	if r.Has(RightTokens) {
		out = append(out, string(ScopeTokens))
	}
	if len(out) == 0 {
		return "(none)"
	}
	return strings.Join(out, ",")
}

// ParseScopes checks the scopes a key is asked for: each must be one of
// AllScopes (surrounding space and commas inside an entry are accepted, so
// `--scope read,tokens` and ["read","tokens"] are one thing). The result is
// sorted and without duplicates; none asked means DefaultScopes.
func ParseScopes(in []string) ([]Scope, error) {
	if len(in) > maxScopeArgs {
		return nil, fmt.Errorf("%d scopes, at most %d: %w", len(in), maxScopeArgs, ErrInvalid)
	}
	var out []Scope
	for _, entry := range in {
		for part := range strings.SplitSeq(entry, ",") {
			part = strings.TrimSpace(part)
			sc := Scope(part)
			if sc.right() == 0 {
				return nil, fmt.Errorf("scope %q: want one of %s: %w", short(part), scopeNames(), ErrInvalid)
			}
			if !slices.Contains(out, sc) {
				out = append(out, sc)
			}
		}
	}
	if len(out) == 0 {
		return slices.Clone(DefaultScopes), nil
	}
	slices.SortFunc(out, func(a, b Scope) int { return slices.Index(AllScopes, a) - slices.Index(AllScopes, b) })
	return out, nil
}

func scopeNames() string {
	names := make([]string, len(AllScopes))
	for i, s := range AllScopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// RightsOf is what the scopes a key is stored with allow. A key stored
// without scopes (made before scopes were checked) has DefaultScopes; an
// unknown stored scope grants nothing.
func RightsOf(scopes []string) Rights {
	if len(scopes) == 0 {
		scopes = []string{string(ScopeRead), string(ScopeWrite)}
	}
	var r Rights
	for _, s := range scopes {
		r |= Scope(s).right()
	}
	return r
}

// Rights is what the key may do.
func (k APIKey) Rights() Rights { return RightsOf(k.Scopes) }

// checkKeyMadeByKey applies the rule for keys managed through another key:
// the acting key needs the tokens scope, and the key made (or revoked) may
// hold no right the acting key lacks and may live no longer than it.
func checkKeyMadeByKey(parent APIKey, child Rights, childExpires time.Time) error {
	pr := parent.Rights()
	if !pr.Has(RightTokens) {
		return fmt.Errorf("managing API keys needs SSH, a signed-in browser session, or an API key with the %q scope; this key has %s: %w",
			ScopeTokens, pr, ErrForbidden)
	}
	if !pr.Covers(child) {
		return fmt.Errorf("a key made or revoked by an API key cannot hold more than it: this key has %s, the other %s: %w",
			pr, child, ErrForbidden)
	}
	if !parent.Expires.IsZero() && (childExpires.IsZero() || childExpires.After(parent.Expires)) {
		return fmt.Errorf("a key made or revoked by an API key cannot outlive it: this key expires %s: %w",
			parent.Expires.UTC().Format(time.RFC3339), ErrForbidden)
	}
	return nil
}

func scopeRights(scopes []Scope) Rights {
	var r Rights
	for _, s := range scopes {
		r |= s.right()
	}
	return r
}
