package redact

import (
	"encoding/json"
	"strings"
)

// Safe is text that has passed a Redactor (or that a Redactor deliberately
// let through byte-exact, like a binary artifact). Only this package can
// make a non-empty Safe: the core hands fronts Safe values, so a front
// cannot show box output that skipped redaction.
type Safe struct{ s string }

// String returns the redacted text.
func (s Safe) String() string { return s.s }

// Bytes returns a copy of the redacted text.
func (s Safe) Bytes() []byte { return []byte(s.s) }

// Len returns the length in bytes.
func (s Safe) Len() int { return len(s.s) }

// MarshalText lets a Safe stand in a JSON, YAML or form value as a string.
func (s Safe) MarshalText() ([]byte, error) { return []byte(s.s), nil }

// MarshalJSON encodes the text as a JSON string.
func (s Safe) MarshalJSON() ([]byte, error) { return json.Marshal(s.s) }

// Join concatenates Safe values: joining redacted pieces needs no second
// pass, since the separator is Safe too.
func Join(parts []Safe, sep Safe) Safe {
	ss := make([]string, len(parts))
	for i, p := range parts {
		ss[i] = p.s
	}
	return Safe{strings.Join(ss, sep.s)}
}
