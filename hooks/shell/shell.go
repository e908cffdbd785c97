// Package shell is what the hooks' two Bash lanes, the guard and the
// read-only lane, share about the shell: the one bash parser configuration
// both decide on, the bounds on a decision's work, the description of a
// word as far as it is known before bash runs it, and bash's own quote
// removal. Each lane walks the syntax tree with its own rules.
package shell

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// MaxCommand and MaxDepth bound the work one decision may take; past them
// the command is denied.
const (
	MaxCommand = 64 << 10
	MaxDepth   = 32
)

// Parse parses a command as bash, the one parser configuration both the
// read-only checker and the guard decide on.
func Parse(command string) (*syntax.File, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return nil, fmt.Errorf("cannot parse the command as bash (%v)", err)
	}
	return f, nil
}

// OutputSinks are the only targets output may be redirected to.
var OutputSinks = map[string]bool{"/dev/null": true, "/dev/stdout": true, "/dev/stderr": true}

// Arg is one word of a simple command as far as it can be known before the
// shell runs it.
type Arg struct {
	// Text is the word with quoting removed. For a word that is not static,
	// computed parts are left as written.
	Text string
	// Static: Text is exactly the single argument the program receives.
	Static bool
	// SafeLead: not static, but every argument it can expand to begins with
	// the same literal character, which is not '-': it is an operand, never
	// an option (a glob like src/*.go, "$dir/x").
	SafeLead bool
}

// String is the word's text, as a reason quotes it.
func (a Arg) String() string { return a.Text }

// Options iterates the arguments before "--" that look like options (GNU
// getopt permutes, so an option after an operand still counts).
func Options(args []Arg) []string {
	var out []string
	for _, a := range args {
		if a.Text == "--" {
			break
		}
		if strings.HasPrefix(a.Text, "-") && a.Text != "-" {
			out = append(out, a.Text)
		}
	}
	return out
}

// UnescapeUnquoted removes backslash quoting from an unquoted literal the
// way bash does (so `-\i` is "-i").
func UnescapeUnquoted(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsDigits reports whether s is a non-empty run of ASCII digits (a file
// descriptor, a positional parameter).
func IsDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// NodeString prints a syntax node for a reason, cut to 80 bytes.
func NodeString(n syntax.Node) string {
	var b strings.Builder
	if err := syntax.NewPrinter().Print(&b, n); err != nil {
		return fmt.Sprintf("%T", n)
	}
	s := b.String()
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
