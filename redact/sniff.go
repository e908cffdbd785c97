package redact

// IsText reports whether b is text by content, whatever its file name says:
// no NUL byte and at most 1 in 10 bytes a control character other than
// tab, line feeds, backspace and escape. It decides only how content is
// presented (text or a blob): redaction never depends on it, since binary
// content is redacted like text (a secret after a NUL byte is still a
// secret).
func IsText(b []byte) bool {
	ctl := 0
	for _, c := range b {
		switch {
		case c == 0:
			return false
		case c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' && c != '\b' && c != 0x1b, c == 0x7f:
			ctl++
		}
	}
	return ctl*10 <= len(b)
}
