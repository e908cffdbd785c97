// Package seal encrypts secrets at rest (GitHub tokens, MCP env) with
// AES-256-GCM under a key kept outside the database: a file <data>/seal.key
// (mode 0600, created once) or the SBX_SEAL_KEY environment variable. A copy
// of the database alone reveals no secret.
//
// A sealed value is: version byte | 12-byte random nonce | ciphertext+tag.
// The caller's aad (e.g. "account:42") is authenticated with it, so a
// ciphertext copied into another row does not open there.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length of a seal key: AES-256.
const KeySize = 32

// KeyFile is the key's name inside the data dir; EnvKey the environment
// variable that, when set, holds the key in standard base64 instead.
const (
	KeyFile = "seal.key"
	EnvKey  = "SBX_SEAL_KEY"
)

// version1 is the only format so far; the byte lets a later format (another
// cipher, key rotation with a key id) coexist with old rows.
const version1 = 1

const nonceSize = 12

// ErrOpen covers every sealed value that does not open: truncated, unknown
// version, tampered, wrong key or wrong aad. It says nothing more on purpose.
var ErrOpen = errors.New("sealed value does not open (tampered, wrong key or wrong row)")

// Sealer seals and opens values under one key. It is safe for concurrent use.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a Sealer for a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext bound to aad with a fresh random nonce.
func (s *Sealer) Seal(plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plaintext)+s.aead.Overhead())
	out[0] = version1
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	return s.aead.Seal(out, out[1:1+nonceSize], plaintext, additional(version1, aad)), nil
}

// Open decrypts a value made by Seal with the same aad; any mismatch is
// ErrOpen.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < 1+nonceSize+s.aead.Overhead() || sealed[0] != version1 {
		return nil, ErrOpen
	}
	pt, err := s.aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], additional(sealed[0], aad))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// additional authenticates the version byte too, so a value cannot be
// relabelled as another format.
func additional(version byte, aad []byte) []byte {
	return append([]byte{version}, aad...)
}

// Load returns the Sealer for a data dir: from EnvKey when getenv returns a
// non-empty value, else from <dataDir>/seal.key, creating that file with a
// new random key (mode 0600, atomically) when it does not exist. A key file
// readable or writable by group or others is refused, as is one of the wrong
// size. getenv nil means os.Getenv.
func Load(dataDir string, getenv func(string) string) (*Sealer, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(EnvKey)); v != "" {
		key, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("%s: not standard base64: %w", EnvKey, err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("%s: decodes to %d bytes, want %d", EnvKey, len(key), KeySize)
		}
		return New(key)
	}
	key, err := loadOrCreateKeyFile(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return nil, err
	}
	return New(key)
}

func loadOrCreateKeyFile(path string) ([]byte, error) {
	key, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
		// Read back whichever key won: another process may have created the
		// file between our read and our link.
		return readKeyFile(path)
	}
	return key, err
}

func readKeyFile(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("seal key file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("seal key file %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("seal key file %s: mode %#o gives group/other access; run chmod 600 %s", path, perm, path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal key file %s: %w", path, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal key file %s: %d bytes, want %d", path, len(key), KeySize)
	}
	return key, nil
}

// createKeyFile writes a fresh key to a temp file, fsyncs it and links it into
// place. Link, unlike rename, never replaces an existing key: losing the key
// would make every sealed secret unreadable.
func createKeyFile(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".seal.key.tmp-*")
	if err != nil {
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create seal key %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("create seal key %s: sync dir: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("create seal key %s: sync dir: %w", path, err)
	}
	return nil
}
