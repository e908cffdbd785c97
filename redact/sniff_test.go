package redact

import (
	"bytes"
	"compress/gzip"
	"context"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func pngBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipBytes(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(s))
	z.Close()
	return b.Bytes()
}

func TestIsText(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		want bool
	}{
		{"empty", nil, true},
		{"env", []byte("GITHUB_TOKEN=x\nDEBUG=1\n"), true},
		{"utf8", []byte("naïve — 日本語\r\n\ttab"), true},
		{"latin1", []byte("caf\xe9 cr\xe8me"), true},
		{"ansi", []byte("\x1b[32mok\x1b[0m\b\f\v"), true},
		{"nul", []byte("abc\x00def"), false},
		{"utf16", []byte("a\x00b\x00"), false},
		{"control heavy", bytes.Repeat([]byte{1, 2, 3, 'a'}, 10), false},
		{"png", pngBytes(t), false},
		{"gzip", gzipBytes(t, strings.Repeat("TOKEN=abc\n", 100)), false},
	} {
		if got := IsText(c.in); got != c.want {
			t.Errorf("IsText(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRegressionArtifactUnknownExtension: text artifacts with an unknown or
// no extension (.env, .pem, extensionless) once bypassed redaction. Every
// artifact streams through the redactor now, whatever its name or content.
func TestRegressionArtifactUnknownExtension(t *testing.T) {
	r := testRedactor(t)
	dir := t.TempDir()
	key := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n"
	files := map[string]string{
		".env":       "GITHUB_TOKEN=" + ghpToken + "\nDB_PASSWORD=hunter2\n",
		"id.pem":     key,
		"NOTES":      "remember " + knownLong + "\n",
		"shot.png":   "not an image: " + knownLong,
		"config.xyz": `{"api_key": "` + knownLong + `"}`,
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r.NewReader(f))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		got := string(b)
		if strings.Contains(got, ghpToken) || strings.Contains(got, knownLong) || strings.Contains(got, "hunter2") ||
			strings.Contains(got, "b3BlbnNzaC1rZXkt") {
			t.Errorf("%s: secret survived: %q", name, got)
		}
		if got == content {
			t.Errorf("%s: unchanged", name)
		}
	}
}

// TestBinaryRedaction: binary content is redacted like text (issue 15: a
// file whose first bytes looked binary was served byte for byte). A known
// secret inside binary data is matched byte-exact, the credential patterns
// apply, the bytes around a match are untouched, and a binary without
// anything to redact comes out byte-exact, at any chunking.
func TestBinaryRedaction(t *testing.T) {
	r := testRedactor(t)
	png := pngBytes(t)
	noise := make([]byte, 300<<10)
	for i := range noise {
		noise[i] = byte(i*131 + i>>8)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name    string
		in      []byte
		secrets []string // must be gone
		keep    [][]byte // must survive (the bytes around a match)
	}{
		{"NUL then a known secret", cat([]byte{0}, []byte(knownLong)), []string{knownLong}, [][]byte{{0}}},
		{"NUL then a GitHub token", cat([]byte{0}, []byte(ghpToken)), []string{ghpToken}, [][]byte{{0}}},
		{"known secret inside a PNG", cat(png, []byte(knownLong), png), []string{knownLong}, [][]byte{png}},
		{"token inside a gzip stored beside", cat(gzipBytes(t, "x"), []byte{0, 0xff}, []byte(ghpToken), []byte{0xfe, 0}), []string{ghpToken}, nil},
		{"short known secret between NULs", cat([]byte{0, 0}, []byte(knownShort), []byte{0, 0}), []string{knownShort}, [][]byte{{0, 0}}},
		{"secret deep in 300 KiB of noise", cat(noise, []byte{0}, []byte(knownLong), []byte{0}, noise), []string{knownLong}, [][]byte{noise[:4096], noise[len(noise)-4096:]}},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 7, 4096, 1 << 20} {
			got, err := io.ReadAll(r.NewReader(iotestChunks(c.in, chunk)))
			if err != nil {
				t.Fatalf("%s/%d: %v", c.name, chunk, err)
			}
			for _, s := range c.secrets {
				if bytes.Contains(got, []byte(s)) {
					t.Errorf("%s/%d: %q survived", c.name, chunk, s)
				}
			}
			for _, k := range c.keep {
				if !bytes.Contains(got, k) {
					t.Errorf("%s/%d: the bytes around the match were changed", c.name, chunk)
				}
			}
			if !bytes.Contains(got, []byte(ellipsis)) {
				t.Errorf("%s/%d: no replacement", c.name, chunk)
			}
		}
	}
	// Nothing to redact: byte-exact.
	for _, in := range [][]byte{png, noise, gzipBytes(t, strings.Repeat("plain text ", 1000))} {
		got, err := io.ReadAll(r.NewReader(bytes.NewReader(in)))
		if err != nil || !bytes.Equal(got, in) {
			t.Errorf("a binary with nothing to redact changed (%d → %d bytes, %v)", len(in), len(got), err)
		}
	}
}

// iotestChunks reads b n bytes at a time.
func iotestChunks(b []byte, n int) io.Reader { return &chunked{b: b, n: n} }

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// fineGrained is a known secret with no recognisable shape.
const fineGrained = "Zx8kQ2mW9pL4vN7rT1yB5cH3jF6gD0sA"

// git runs the real git in dir and streams its output through w.
func git(t *testing.T, dir string, w *Writer, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %v: %v: %s", args, err, errOut.String())
	}
}

// TestRegressionGitRemoteToken: the 2026-08-27 incident. A run printed
// `git remote -v` and the remote carried the clone token. Real git output,
// streamed like a live log, with a credential-shaped token and a known
// secret of no recognisable shape.
func TestRegressionGitRemoteToken(t *testing.T) {
	r, err := New(t.Context(), func(context.Context) ([]string, error) { return []string{fineGrained}, nil }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var sink bytes.Buffer
	w := r.NewWriter(&sink)
	git(t, dir, w, "init", "-q")
	git(t, dir, w, "remote", "add", "origin", "https://x-access-token:"+ghpToken+"@github.com/acme/app.git")
	git(t, dir, w, "remote", "add", "fork", "https://"+fineGrained+"@github.com/me/app.git")
	git(t, dir, w, "remote", "-v")
	w.Close()
	out := sink.String()
	if strings.Contains(out, ghpToken) || strings.Contains(out, fineGrained) {
		t.Fatalf("token in git remote -v output:\n%s", out)
	}
	for _, want := range []string{
		"origin\thttps://x-access-token:ghp_…WXYZ@github.com/acme/app.git (fetch)",
		"fork\thttps://…D0sA@github.com/me/app.git (push)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// TestRegressionDiffBody: diff bodies once bypassed redaction. Real git
// diff output; the diff's structure stays intact.
func TestRegressionDiffBody(t *testing.T) {
	r := testRedactor(t)
	dir := t.TempDir()
	var discard bytes.Buffer
	w := r.NewWriter(&discard)
	git(t, dir, w, "init", "-q")
	os.WriteFile(filepath.Join(dir, "deploy.sh"), []byte("#!/bin/sh\necho deploy\n"), 0o600)
	git(t, dir, w, "add", ".")
	git(t, dir, w, "commit", "-q", "-m", "init")
	os.WriteFile(filepath.Join(dir, "deploy.sh"), []byte("#!/bin/sh\nexport GH_TOKEN="+ghpToken+"\ncurl -u admin:"+knownLong+" https://x\necho deploy\n"), 0o600)
	var sink bytes.Buffer
	w = r.NewWriter(&sink)
	git(t, dir, w, "diff")
	w.Close()
	out := sink.String()
	if strings.Contains(out, ghpToken) || strings.Contains(out, knownLong) {
		t.Fatalf("secret in diff:\n%s", out)
	}
	for _, want := range []string{"diff --git a/deploy.sh b/deploy.sh", "+export GH_TOKEN=ghp_…WXYZ\n", "+curl -u admin:…alue https://x\n", " echo deploy\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// TestRegressionTextPaths: answers, tasks and questions once bypassed
// redaction. They are one-shot strings; the core passes each through
// String before any front sees it.
func TestRegressionTextPaths(t *testing.T) {
	r := testRedactor(t)
	for name, in := range map[string]string{
		"answer":   "use this token: " + ghpToken,
		"task":     "deploy with DB_PASSWORD=" + knownShort + " please",
		"question": "Should I push with " + knownLong + "?\nOr ask first?",
	} {
		got := r.String(in).String()
		if strings.Contains(got, ghpToken) || strings.Contains(got, knownShort) || strings.Contains(got, knownLong) {
			t.Errorf("%s: secret survived: %q", name, got)
		}
	}
}
