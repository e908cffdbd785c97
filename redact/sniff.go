package redact

// IsText reports whether b is text by content, whatever its file name says:
// no NUL byte and at most 1 in 10 bytes a control character other than
// tab, line feeds, backspace and escape. It leans towards text on purpose:
// redaction is the identity on text without credentials, so calling a
// NUL-free binary "text" costs nothing unless it holds a credential, while
// calling a text file "binary" would skip redaction.
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

// Artifact applies the artifact policy to a file's content: text (by
// content, so .env, .pem and extensionless files count, and a renamed
// "image.png" full of text too) is redacted; binary is returned byte-exact.
// Check binaries with Contains before serving them if they may carry
// secrets.
func (r *Redactor) Artifact(b []byte) Safe {
	if IsText(b) {
		return r.Bytes(b)
	}
	return Safe{string(b)}
}
