package keys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// HostKeyFile is the host key's file name inside the data dir.
const HostKeyFile = "ssh_host_ed25519_key"

// LoadOrCreateHostKey returns the ed25519 host key at dir/HostKeyFile,
// generating it once (mode 0600, written to a temp file, fsynced and linked
// into place so a crash never leaves half a key and two starting processes
// agree on one key). A key file readable by group or others is refused, as
// sshd does.
func LoadOrCreateHostKey(dir string) (ssh.Signer, error) {
	path := filepath.Join(dir, HostKeyFile)
	signer, err := loadHostKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return signer, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create host key dir %s: %w", dir, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "sbx host key")
	if err != nil {
		return nil, fmt.Errorf("encode host key: %w", err)
	}
	if err := writeNew(path, pem.EncodeToMemory(block)); err != nil {
		return nil, fmt.Errorf("write host key %s: %w", path, err)
	}
	return loadHostKey(path)
}

func loadHostKey(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open host key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat host key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("host key %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("host key %s has mode %04o, readable by others; run chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read host key %s: %w", path, err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("parse host key %s: %w", path, err)
	}
	if t := signer.PublicKey().Type(); t != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("host key %s is %s, want ssh-ed25519", path, t)
	}
	return signer, nil
}

// writeNew atomically creates path with data and mode 0600; if path appeared
// meanwhile, the existing file wins and nil is returned.
func writeNew(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Link, unlike rename, never replaces an existing key.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
