package sshd

import (
	"strings"
	"testing"
	"unicode/utf8"

	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/internal/termtext"
)

// terminalSafe fails unless out is what the terminal sanitizer would
// print: no ESC, nothing else a terminal acts on, valid UTF-8.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsRune(out, 0x1b) || termtext.String(out) != out || !utf8.ValidString(out) {
		t.Errorf("%s: box text reaches the terminal unsanitized:\n%q", what, out)
	}
}

// TestRegressionSSHErrorEscapes: an error quoting its input (here pflag's
// "unknown flag: --…", which quotes raw) is sanitized like any output:
// every command's stderr passes the one writer. No box needed.
func TestRegressionSSHErrorEscapes(t *testing.T) {
	f := start(t, 100)
	c, err := f.dial(gossh.PublicKeys(f.op))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stdout, stderr, err := run(t, c, "whoami --\x1b]2;sbx-owned-title\a\u202e")
	if err == nil || !strings.Contains(stderr, `unknown flag: --\u001b]2;sbx-owned-title\u0007\u202e`) {
		t.Fatalf("whoami with a hostile flag: %v\nstdout %q\nstderr %q", err, stdout, stderr)
	}
	terminalSafe(t, "stderr", stderr)
	// Harmless output passes byte for byte.
	if stdout, _, err := run(t, c, "whoami"); err != nil || !strings.HasPrefix(stdout, "bob (operator)\nkey SHA256:") {
		t.Fatalf("whoami: %v %q", err, stdout)
	}
}
