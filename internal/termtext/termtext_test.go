package termtext

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// cases are inputs and what a terminal gets, one per family.
var cases = []struct {
	name, in, want string
}{
	// Harmless text passes byte for byte.
	{"empty", "", ""},
	{"ascii", "hello, world: 1 + 1 = 2 ~ `x` {y} [z] \\ / | ^[ <U+202E>", "hello, world: 1 + 1 = 2 ~ `x` {y} [z] \\ / | ^[ <U+202E>"},
	{"tabs and newlines", "a\tb\n\tc\n\n", "a\tb\n\tc\n\n"},
	{"crlf", "line one\r\nline two\r\n", "line one\r\nline two\r\n"},
	{"letters", "naïve café Ελληνικά русский 日本語 한국어 עברית العربية हिन्दी", "naïve café Ελληνικά русский 日本語 한국어 עברית العربية हिन्दी"},
	{"emoji", "👍🏽 👨‍👩‍👧 🏳️‍🌈 ❤️ 🇩🇪", "👍🏽 👨‍👩‍👧 🏳️‍🌈 ❤️ 🇩🇪"},
	{"replacement char", "a\uFFFDb", "a\uFFFDb"},
	{"nbsp and zero width", "a\u00a0b\u200bc\u200dd\ufeff", "a\u00a0b\u200bc\u200dd\ufeff"},
	{"diff", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n"},

	// Escape sequences: the introducer is escaped, the rest stays as text.
	{"osc 52 bel", "\x1b]52;c;cHduZWQ=\a", `\u001b]52;c;cHduZWQ=\u0007`},
	{"osc 52 st", "\x1b]52;c;cHduZWQ=\x1b\\", `\u001b]52;c;cHduZWQ=\u001b\`},
	{"osc 0 title", "\x1b]0;owned\a", `\u001b]0;owned\u0007`},
	{"osc 2 title", "\x1b]2;owned\x1b\\", `\u001b]2;owned\u001b\`},
	{"osc 8 link", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", `\u001b]8;;http://evil\u001b\click\u001b]8;;\u001b\`},
	{"csi erase and move", "ok\x1b[2K\x1b[1A\x1b[2J\x1b[H", `ok\u001b[2K\u001b[1A\u001b[2J\u001b[H`},
	{"csi sgr", "\x1b[31mred\x1b[0m", `\u001b[31mred\u001b[0m`},
	{"dcs", "\x1bP$q\"p\x1b\\", `\u001bP$q"p\u001b\`},
	{"apc", "\x1b_Gf=100;AAAA\x1b\\", `\u001b_Gf=100;AAAA\u001b\`},
	{"pm", "\x1b^private\x1b\\", `\u001b^private\u001b\`},
	{"sos", "\x1bXstring\x1b\\", `\u001bXstring\u001b\`},
	{"esc alone", "\x1b", `\u001b`},
	{"unterminated osc keeps what follows", "\x1b]52;c;AAAA\nreal line\n", "\\u001b]52;c;AAAA\nreal line\n"},
	{"esc c reset", "\x1bc", `\u001bc`},

	// C0, DEL, CR.
	{"c0", "\x00\x01\x07\x08\x0b\x0c\x0e\x1f", `\u0000\u0001\u0007\u0008\u000b\u000c\u000e\u001f`},
	{"del", "a\x7fb", `a\u007fb`},
	{"lone cr overwrites", "all tests passed\rFAIL", `all tests passed\u000dFAIL`},
	{"cr at end", "x\r", `x\u000d`},
	{"cr cr lf", "x\r\r\n", "x\\u000d\r\n"},
	{"lf cr", "x\n\ry", "x\n\\u000dy"},

	// C1: as raw bytes (not UTF-8) and as UTF-8 code points.
	{"raw 8-bit csi", "\x9b31m", `\x9b31m`},
	{"raw 8-bit osc st", "\x9d0;t\x9c", `\x9d0;t\x9c`},
	{"utf-8 csi", "\u009b2J", `\u009b2J`},
	{"utf-8 osc st", "\u009d52;c;AAAA\u009c", `\u009d52;c;AAAA\u009c`},
	{"utf-8 nel dcs", "\u0085\u0090", `\u0085\u0090`},
	{"utf-8 c1 bounds", "\u0080\u009f\u00a0", `\u0080\u009f` + "\u00a0"},

	// Bidi controls (Trojan Source).
	{"rlo", "access = \"user\u202e \u2066// admin\u2069 \u2066\"", `access = "user\u202e \u2066// admin\u2069 \u2066"`},
	{"embeddings", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
	{"isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
	{"marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},

	// Invalid UTF-8.
	{"invalid byte", "a\xffb", `a\xffb`},
	{"bad continuation", "\xc3(", `\xc3(`},
	{"truncated at end", "ok\xe2\x82", `ok\xe2\x82`},
	{"surrogate", "\xed\xa0\x80", `\xed\xa0\x80`},
	{"overlong slash", "\xc0\xaf", `\xc0\xaf`},
	{"too large", "\xf4\x90\x80\x80", `\xf4\x90\x80\x80`},
	{"lone continuation", "\x80", `\x80`},
}

func TestString(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := String(c.in); got != c.want {
				t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
			}
			if got := String(c.want); got != c.want {
				t.Errorf("not idempotent: String(%q) = %q", c.want, got)
			}
		})
	}
}

// writeAll writes parts through a Writer, then flushes.
func writeAll(t *testing.T, parts ...string) string {
	t.Helper()
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, p := range parts {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// A stream cut anywhere comes out as the whole text does.
func TestWriterSplits(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i := 0; i <= len(c.in); i++ {
				if got := writeAll(t, c.in[:i], c.in[i:]); got != c.want {
					t.Errorf("split at %d: %q, want %q", i, got, c.want)
				}
			}
			var bytewise []string
			for i := range len(c.in) {
				bytewise = append(bytewise, c.in[i:i+1])
			}
			if got := writeAll(t, bytewise...); got != c.want {
				t.Errorf("byte by byte: %q, want %q", got, c.want)
			}
		})
	}
}

func TestWriterCarriesState(t *testing.T) {
	for _, c := range []struct {
		name  string
		parts []string
		want  string
	}{
		{"esc then osc body", []string{"log line\x1b", "]52;c;cHduZWQ=\a\n"}, "log line\\u001b]52;c;cHduZWQ=\\u0007\n"},
		{"utf-8 c1 cut", []string{"a\xc2", "\x9b2J"}, `a\u009b2J`},
		{"bidi cut twice", []string{"\xe2", "\x80", "\xae!"}, `\u202e!`},
		{"emoji cut", []string{"\xf0\x9f", "\x91\x8d"}, "👍"},
		{"cr then lf", []string{"a\r", "\nb"}, "a\r\nb"},
		{"cr then text", []string{"a\r", "b"}, `a\u000db`},
		{"cr then nothing", []string{"a\r", ""}, `a\u000d`},
		{"incomplete at flush", []string{"a\xe2\x80"}, `a\xe2\x80`},
		{"empty writes", []string{"", "\x1b", "", "[2J"}, `\u001b[2J`},
	} {
		if got := writeAll(t, c.parts...); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Held-back bytes are not written until they can be judged.
func TestWriterHoldsBack(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	_, _ = w.Write([]byte("ab\xc2"))
	if out.String() != "ab" {
		t.Fatalf("wrote %q before the rest of the rune", out.String())
	}
	_, _ = w.Write([]byte("\x85"))
	if out.String() != `ab\u0085` {
		t.Fatalf("got %q", out.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

func TestWriterError(t *testing.T) {
	w := NewWriter(failWriter{})
	if n, err := w.Write([]byte("x")); n != 0 || err == nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

// JSON through the sanitizer stays valid and decodes to the same value:
// encoding/json leaves DEL, C1 and bidi controls raw, the sanitizer
// escapes them the way JSON reads back.
func TestJSONStaysJSON(t *testing.T) {
	type doc struct {
		Question string   `json:"question"`
		Lines    []string `json:"lines"`
	}
	var in doc
	in.Question = "\x1b]52;c;cHduZWQ=\a\u009b2J\u202eevil\u2066\x7f\r\n"
	for _, c := range cases {
		if utf8.ValidString(c.in) {
			in.Lines = append(in.Lines, c.in)
		}
	}
	var out bytes.Buffer
	w := NewWriter(&out)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out.Bytes()) {
		t.Fatalf("not JSON: %s", out.String())
	}
	var back doc
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Question != in.Question || strings.Join(back.Lines, "|") != strings.Join(in.Lines, "|") {
		t.Fatalf("decoded %+v, want %+v", back, in)
	}
	checkSafe(t, out.String())
}

// checkSafe fails when s holds anything a terminal acts on.
func checkSafe(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Fatalf("not UTF-8: %q", s)
	}
	for i, r := range s {
		switch {
		case r == '\r':
			if i+1 >= len(s) || s[i+1] != '\n' {
				t.Fatalf("lone CR at %d: %q", i, s)
			}
		case r == '\t' || r == '\n':
		case r < 0x20 || r == 0x7f:
			t.Fatalf("control %U at %d: %q", r, i, s)
		case r >= 0x80 && r <= 0x9f:
			t.Fatalf("C1 %U at %d: %q", r, i, s)
		case (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0x200e || r == 0x200f || r == 0x061c:
			t.Fatalf("bidi control %U at %d: %q", r, i, s)
		}
	}
}

// FuzzTerminalSanitizer: whatever goes in, nothing a terminal acts on comes
// out (no ESC or other C0 control but tab, newline and the CR of a CRLF, no
// DEL, no C1, no bidi control, valid UTF-8); a Writer fed the input in two
// writes agrees with String; sanitizing is idempotent; text with nothing to
// escape passes unchanged.
func FuzzTerminalSanitizer(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c.in), uint(len(c.in)/2))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint) {
		got := String(string(in))
		checkSafe(t, got)
		if again := String(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", in, got, again)
		}
		i := int(cut % uint(len(in)+1))
		var out bytes.Buffer
		w := NewWriter(&out)
		_, _ = w.Write(in[:i])
		_, _ = w.Write(in[i:])
		_ = w.Flush()
		if out.String() != got {
			t.Fatalf("split at %d: %q, String: %q", i, out.String(), got)
		}
		if !bytes.ContainsFunc(in, func(r rune) bool {
			return r == utf8.RuneError || r == '\r' || (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f || hidden(r)
		}) && got != string(in) {
			t.Fatalf("harmless %q changed to %q", in, got)
		}
	})
}
