package testutil

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	gossh "golang.org/x/crypto/ssh"
)

// OpenSSHKey makes a new ed25519 key for the real OpenSSH client: its
// private key file (mode 0600, in the test's temp dir) for `ssh -i`, and
// its signer, whose public key the test registers.
func OpenSSHKey(t testing.TB) (file string, signer gossh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err = gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return file, signer
}
