package fleet

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm"
)

func TestValidRef(t *testing.T) {
	for _, ok := range []string{"", "main", "v1.2.3", "feature/x-y", "0123abcd", "release_2026"} {
		if err := validRef(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"-x", "--upload-pack=evil", "a..b", "/abs", "x/", "a b", "a;b", "$(x)", "x.lock", "a@{1}", "é"} {
		if err := validRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestCleanAllow(t *testing.T) {
	got, err := cleanAllow([]string{"Example.com", "*.npmjs.org", "example.com", "Example.com.:8443", "*.svc.example:9000", "1.2.3.4:80", "[2001:DB8::1]:853"})
	if err != nil || !slices.Equal(got, []string{"example.com", "*.npmjs.org", "example.com:8443", "*.svc.example:9000", "1.2.3.4:80", "[2001:db8::1]:853"}) {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range []string{"", "*.", "a..b", "-a.com", "http://x.com", "x.com/path", "*", "x.com:", "x.com:0", "x.com:65536",
		"x.com:ssh", "*.1.2.3.4", "127.1", "2130706433", "[example.com]:80", "a b.com"} {
		if _, err := cleanAllow([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzValidRef(f *testing.F) {
	for _, s := range []string{"main", "-x", "a..b", "v1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if validRef(ref) != nil {
			return
		}
		// Nothing accepted may read as an option or leave the ref namespace.
		if ref != "" && (ref[0] == '-' || ref[0] == '/') {
			t.Errorf("accepted %q", ref)
		}
		for _, c := range ref {
			if c <= ' ' || c == '\\' || c == ':' || c == '~' || c == '^' || c == '?' || c == '*' || c == '[' {
				t.Errorf("accepted %q", ref)
			}
		}
	})
}

func TestBoxName(t *testing.T) {
	for _, task := range []string{"Fix the flaky test in CI please", "", "!!!", "日本語", "a-b c_d"} {
		if err := vm.ValidName(boxName(task)); err != nil {
			t.Errorf("%q → %q: %v", task, boxName(task), err)
		}
	}
}

// Regression (MCP review): a resume offset inside a line that holds a
// secret must not hand out the secret's unrecognisable tail.
func TestLogOffsetMidSecretRegression(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/x.log"
	line1 := "first line\n"
	line2 := "token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB here\n"
	if err := os.WriteFile(p, []byte(line1+line2), 0o600); err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off <= int64(len(line1+line2)); off++ {
		got := lineStart(p, off)
		want := int64(0)
		if off > int64(len(line1)) || off == int64(len(line1)) {
			want = int64(len(line1))
		}
		if off == int64(len(line1+line2)) {
			want = off
		}
		if got != want {
			t.Errorf("lineStart(%d) = %d, want %d", off, got, want)
		}
	}
}

// Regression (attach, issue 6): a typed letter that could begin a secret
// echoes within the quiet time, not at the next line end; a secret printed
// in one piece is still redacted.
func TestInteractiveEchoRegression(t *testing.T) {
	red, err := redact.New(context.Background(), nil, redact.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, in := io.Pipe()
	out := interactive(red, src, 20*time.Millisecond)
	got := make(chan string, 16)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := out.Read(buf)
			if n > 0 {
				got <- string(buf[:n])
			}
			if err != nil {
				close(got)
				return
			}
		}
	}()
	in.Write([]byte("g"))
	select {
	case s := <-got:
		if s != "g" {
			t.Errorf("echo %q", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a typed 'g' did not echo")
	}
	tok := "ghp_" + strings.Repeat("Zq9x", 9)
	in.Write([]byte("cat: " + tok + "\r\n"))
	in.Close()
	var all strings.Builder
	for s := range got {
		all.WriteString(s)
	}
	if strings.Contains(all.String(), tok) || !strings.Contains(all.String(), "ghp_…") {
		t.Errorf("terminal output: %q", all.String())
	}
}
