package redact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// JSON redacts every string (keys included) in a JSON document and keeps
// everything else byte-exact: layout, key order, numbers. Strings are
// decoded first, so an escaped secret ("\u0067hp_…") is caught, and a
// redacted string is re-encoded, so the result is valid JSON.
func (r *Redactor) JSON(doc []byte) (Safe, error) {
	if !json.Valid(doc) {
		return Safe{}, errors.New("redact JSON: input is not valid JSON")
	}
	a := r.current()
	var out []byte
	last := 0
	for i := 0; i < len(doc); i++ {
		if doc[i] != '"' {
			continue
		}
		j := i + 1
		for doc[j] != '"' {
			if doc[j] == '\\' {
				j++
			}
			j++
		}
		lit := doc[i : j+1]
		var s string
		if bytes.IndexByte(lit, '\\') < 0 {
			s = string(lit[1 : len(lit)-1])
		} else if err := json.Unmarshal(lit, &s); err != nil {
			return Safe{}, fmt.Errorf("redact JSON: string at byte %d: %w", i, err)
		}
		if red, changed := a.redact([]byte(s)); changed {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(string(red)); err != nil {
				return Safe{}, fmt.Errorf("redact JSON: string at byte %d: %w", i, err)
			}
			out = append(out, doc[last:i]...)
			out = append(out, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
			last = j + 1
		}
		i = j
	}
	if out == nil {
		return Safe{string(doc)}, nil
	}
	return Safe{string(append(out, doc[last:]...))}, nil
}
