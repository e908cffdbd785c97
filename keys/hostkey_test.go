package keys_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/keys"
)

func TestHostKeyCreatedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s1, err := keys.LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s1.PublicKey().Type() != ssh.KeyAlgoED25519 {
		t.Errorf("type %s", s1.PublicKey().Type())
	}
	path := filepath.Join(dir, keys.HostKeyFile)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 600", st.Mode().Perm())
	}
	pem, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(pem), "-----BEGIN OPENSSH PRIVATE KEY-----") {
		t.Errorf("not OpenSSH PEM: %.40q", pem)
	}
	s2, err := keys.LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f1, f2 := ssh.FingerprintSHA256(s1.PublicKey()), ssh.FingerprintSHA256(s2.PublicKey()); f1 != f2 {
		t.Errorf("fingerprint changed on reopen: %s then %s", f1, f2)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
}

func TestHostKeyConcurrentStartsAgree(t *testing.T) {
	dir := t.TempDir()
	fps := make([]string, 8)
	var wg sync.WaitGroup
	for i := range fps {
		wg.Go(func() {
			s, err := keys.LoadOrCreateHostKey(dir)
			if err != nil {
				t.Error(err)
				return
			}
			fps[i] = ssh.FingerprintSHA256(s.PublicKey())
		})
	}
	wg.Wait()
	for _, fp := range fps {
		if fp != fps[0] {
			t.Fatalf("concurrent starts produced different keys: %v", fps)
		}
	}
}

func TestHostKeyRefusesLoosePermissions(t *testing.T) {
	dir := t.TempDir()
	s, err := keys.LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, keys.HostKeyFile)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		os.Chmod(path, mode)
		if _, err := keys.LoadOrCreateHostKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("mode %o: got %v, want a refusal naming chmod 600", mode, err)
		}
	}
	os.Chmod(path, 0o400)
	again, err := keys.LoadOrCreateHostKey(dir)
	if err != nil || ssh.FingerprintSHA256(again.PublicKey()) != ssh.FingerprintSHA256(s.PublicKey()) {
		t.Errorf("mode 400: %v", err)
	}
}

func TestHostKeyRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, keys.HostKeyFile)
	os.WriteFile(path, []byte("not a key"), 0o600)
	if _, err := keys.LoadOrCreateHostKey(dir); err == nil || !strings.Contains(err.Error(), "parse host key") {
		t.Errorf("garbage: %v", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "not a key" {
		t.Error("garbage host key was overwritten")
	}
}
