// Package termtext makes text safe to print on an operator's terminal: the
// one sanitizer every box-derived string passes on its way to a terminal
// (the SSH commands' output and errors, the fleet TUI). A box controls its
// questions, logs, patches and file contents; printed raw, an escape
// sequence in them writes the operator's clipboard (OSC 52), sets the
// window title (OSC 0/2), moves the cursor or erases lines to fake output
// (CSI), and bidi controls reorder what the operator reads (Trojan Source).
//
// What passes unchanged: printable UTF-8 (letters of every script, emoji
// with their joiners), space, tab, newline, and a carriage return directly
// before a newline (a CRLF line end moves nothing). Everything else is made
// visible rather than dropped, so the operator sees that something was there:
//
//   - a control code point is written as a JSON/Go escape, \u followed by
//     four lowercase hex digits: the C0 controls but tab and newline (ESC is
//     \u001b, a lone carriage return \u000d), DEL (\u007f), the C1 controls
//     U+0080–U+009F, and the bidi controls U+202A–U+202E, U+2066–U+2069,
//     U+200E, U+200F and U+061C;
//   - a byte that is not part of valid UTF-8 is written as \x and two
//     lowercase hex digits (a raw 8-bit C1 byte such as 0x9b is one).
//
// Escape sequences (CSI, OSC, DCS, APC, PM, SOS) are not parsed: their
// introducer, ESC or an 8-bit C1 code, is escaped, which leaves the rest of
// the sequence inert text the operator can read. An unterminated sequence
// therefore never swallows what follows it, and nothing is hidden.
//
// Output through JSON stays valid JSON and decodes to the same value:
// encoding/json already escapes C0 controls, and the code points it leaves
// raw (DEL, C1, bidi) become \u escapes, which JSON reads back as the same
// code points. Sanitizing is idempotent.
package termtext

import (
	"io"
	"sync"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// String returns s safe to print on a terminal; s itself when it already is.
func String(s string) string {
	i := safePrefix(s)
	if i == len(s) {
		return s
	}
	out := make([]byte, 0, len(s)+16)
	out = append(out, s[:i]...)
	out, _ = appendSafe(out, []byte(s[i:]), true)
	return string(out)
}

// safePrefix is the length of the longest prefix of s that passes
// unchanged, ending before a carriage return it cannot judge alone.
func safePrefix(s string) int {
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f):
			i++
		case c == '\r' && i+1 < len(s) && s[i+1] == '\n':
			i += 2
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if (r == utf8.RuneError && size == 1) || hidden(r) {
				return i
			}
			i += size
		default:
			return i
		}
	}
	return i
}

// hidden reports whether r is a code point a terminal acts on or that
// reorders text: C1 controls and the bidi controls.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1: CSI, OSC, DCS, … as one code point
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x200e || r == 0x200f || r == 0x061c: // LRM, RLM, ALM
		return true
	}
	return false
}

// appendSafe appends p, sanitized, to dst. Unless final, a tail of p that
// cannot be judged without what follows (a carriage return, an incomplete
// UTF-8 sequence) is left out; rest is its length.
func appendSafe(dst, p []byte, final bool) (out []byte, rest int) {
	i := 0
	for i < len(p) {
		c := p[i]
		switch {
		case c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f):
			dst = append(dst, c)
			i++
		case c == '\r':
			switch {
			case i+1 < len(p) && p[i+1] == '\n':
				dst = append(dst, '\r', '\n')
				i += 2
			case i+1 == len(p) && !final:
				return dst, 1
			default:
				dst = appendCode(dst, '\r')
				i++
			}
		case c < utf8.RuneSelf: // the other C0 controls, DEL
			dst = appendCode(dst, rune(c))
			i++
		default:
			if !final && !utf8.FullRune(p[i:]) {
				return dst, len(p) - i
			}
			r, size := utf8.DecodeRune(p[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			case hidden(r):
				dst = appendCode(dst, r)
			default:
				dst = append(dst, p[i:i+size]...)
			}
			i += size
		}
	}
	return dst, 0
}

// appendCode appends r as \uXXXX (r < 0x10000 for every code point escaped).
func appendCode(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}

// Writer sanitizes a stream: what it writes on is String of everything
// written so far. A sequence split across writes (ESC in one, the rest in
// the next; a UTF-8 encoded C1 or bidi control cut in two; CR then LF) is
// judged whole: up to three bytes wait for the next Write or for Flush.
// It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	w    io.Writer
	pend []byte // held back: a lone CR or an incomplete UTF-8 sequence
	out  []byte
}

// NewWriter returns a Writer sanitizing onto w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write sanitizes p onto the underlying writer. It reports len(p) written
// when the underlying write succeeds, bytes held back included.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := p
	if len(w.pend) > 0 {
		in = append(w.pend, p...)
	}
	var rest int
	w.out, rest = appendSafe(w.out[:0], in, false)
	w.pend = append(w.pend[:0:0], in[len(in)-rest:]...)
	if len(w.out) > 0 {
		if _, err := w.w.Write(w.out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what Write held back, judged as the end of the stream (an
// incomplete UTF-8 sequence as \x bytes, a lone CR as \u000d).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pend) == 0 {
		return nil
	}
	w.out, _ = appendSafe(w.out[:0], w.pend, true)
	w.pend = w.pend[:0]
	_, err := w.w.Write(w.out)
	return err
}
