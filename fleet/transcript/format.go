package transcript

import (
	"fmt"
	"strings"
	"time"
)

// Format renders an event as plain text for a log or a terminal, one or more
// lines without a trailing newline; "" for events not worth showing (status
// lines, empty thinking). Control characters other than newline and tab are
// replaced, since the text comes from inside a box. Fronts still pass it
// through the redactor.
//
//	● I'll read the file first.
//	→ Read /tmp/probe/note.md
//	← Read: 1	# Note …
//	✗ Bash: exit code 1 …
//	■ done in 1.4s, 1 turn, $0.0436, session 81898c55-fde9-4d44-b1f5-fbd77cd4fef6
func Format(e Event) string {
	var s string
	switch e.Kind {
	case KindInit:
		s = fmt.Sprintf("▶ session %s, model %s, %d tools", e.SessionID, e.Model, len(e.Tools))
	case KindSystem:
		return ""
	case KindText:
		s = "● " + indent(e.Text)
	case KindThinking:
		if strings.TrimSpace(e.Text) == "" {
			return ""
		}
		s = "∴ " + indent(e.Text)
	case KindUser:
		s = "› " + indent(e.Text)
	case KindToolCall:
		s = "→ " + e.Tool
		if e.Summary != "" {
			s += " " + e.Summary
		}
	case KindToolResult:
		mark := "←"
		if e.IsError {
			mark = "✗"
		}
		name := e.Tool
		if name == "" {
			name = "result"
		}
		out := e.Output
		if e.Truncated {
			out += " …"
		}
		s = mark + " " + name + ": " + indent(out)
	case KindResult:
		s = formatResult(e.Result)
	default:
		s = "? " + e.Raw
	}
	return sanitize(s)
}

func formatResult(r *Result) string {
	if r == nil {
		return "■ done"
	}
	word := "done"
	if r.IsError {
		word = "failed (" + r.Subtype + ")"
	}
	turns := "turns"
	if r.Turns == 1 {
		turns = "turn"
	}
	s := fmt.Sprintf("■ %s in %s, %d %s, $%.4f", word, r.Duration.Round(100*time.Millisecond), r.Turns, turns, r.CostUSD)
	if r.Denials > 0 {
		s += fmt.Sprintf(", %d tool calls denied", r.Denials)
	}
	if r.SessionID != "" {
		s += ", session " + r.SessionID
	}
	return s
}

// indent continues multi-line text under its marker.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// sanitize replaces C0/C1 control characters (escape sequences) except
// newline and tab.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
