package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func testSealer(t *testing.T) *Sealer {
	t.Helper()
	s, err := New(bytes.Repeat([]byte{7}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	s := testSealer(t)
	for _, tc := range []struct {
		name      string
		plaintext string
		aad       string
	}{
		{"token", "ghp_0123456789abcdefABCDEF0123456789abcd", "account:1"},
		{"empty plaintext", "", "account:2"},
		{"empty aad", "secret", ""},
		{"binary", "\x00\xff\x10", "mcp:env:X"},
		{"large", strings.Repeat("x", 1<<16), "account:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sealed, err := s.Seal([]byte(tc.plaintext), []byte(tc.aad))
			if err != nil {
				t.Fatal(err)
			}
			if tc.plaintext != "" && bytes.Contains(sealed, []byte(tc.plaintext)) {
				t.Fatal("sealed value contains the plaintext")
			}
			if sealed[0] != version1 || len(sealed) != 1+nonceSize+len(tc.plaintext)+16 {
				t.Fatalf("sealed layout: version %d len %d", sealed[0], len(sealed))
			}
			got, err := s.Open(sealed, []byte(tc.aad))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.plaintext {
				t.Fatalf("Open = %q, want %q", got, tc.plaintext)
			}
		})
	}
}

func TestNoncesDiffer(t *testing.T) {
	s := testSealer(t)
	a, _ := s.Seal([]byte("same"), []byte("account:1"))
	b, _ := s.Seal([]byte("same"), []byte("account:1"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical: nonce reused")
	}
}

// TestTamper: every single-bit flip, every truncation, a wrong aad (the
// ciphertext moved to another row), a wrong key and an unknown version all
// fail with ErrOpen.
func TestTamper(t *testing.T) {
	s := testSealer(t)
	sealed, err := s.Seal([]byte("ghp_secret"), []byte("account:1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range sealed {
		for bit := 0; bit < 8; bit++ {
			c := bytes.Clone(sealed)
			c[i] ^= 1 << bit
			if _, err := s.Open(c, []byte("account:1")); !errors.Is(err, ErrOpen) {
				t.Fatalf("flip byte %d bit %d: err %v, want ErrOpen", i, bit, err)
			}
		}
	}
	for n := 0; n < len(sealed); n++ {
		if _, err := s.Open(sealed[:n], []byte("account:1")); !errors.Is(err, ErrOpen) {
			t.Fatalf("truncated to %d: err %v, want ErrOpen", n, err)
		}
	}
	if _, err := s.Open(append(bytes.Clone(sealed), 0), []byte("account:1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("extended: err %v, want ErrOpen", err)
	}
	for _, aad := range []string{"account:2", "", "account:1 ", "account:10"} {
		if _, err := s.Open(sealed, []byte(aad)); !errors.Is(err, ErrOpen) {
			t.Fatalf("aad %q: err %v, want ErrOpen", aad, err)
		}
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(sealed, []byte("account:1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("wrong key: err %v, want ErrOpen", err)
	}
}

// TestSwapBetweenRows is the attack aad exists for: a database writer copies
// account 2's ciphertext into account 1's row.
func TestSwapBetweenRows(t *testing.T) {
	s := testSealer(t)
	two, _ := s.Seal([]byte("token-of-two"), []byte("account:2"))
	if _, err := s.Open(two, []byte("account:1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("swapped ciphertext opened: %v", err)
	}
}

func TestNewBadKey(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, err := New(make([]byte, n)); err == nil {
			t.Fatalf("New accepted a %d-byte key", n)
		}
	}
}

func noEnv(string) string { return "" }

func TestLoadCreatesKeyFileOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s1, err := Load(dir, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("key file mode %v size %d", fi.Mode(), fi.Size())
	}
	sealed, _ := s1.Seal([]byte("x"), []byte("a"))
	s2, err := Load(dir, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Open(sealed, []byte("a")); err != nil || string(got) != "x" {
		t.Fatalf("second Load uses another key: %q %v", got, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("data dir holds %d entries, want only %s (temp file left?)", len(ents), KeyFile)
	}
}

// TestLoadConcurrentCreate: many first starts at once agree on one key.
func TestLoadConcurrentCreate(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	sealers := make([]*Sealer, 8)
	errs := make([]error, 8)
	for i := range sealers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sealers[i], errs[i] = Load(dir, noEnv)
		}()
	}
	wg.Wait()
	sealed, _ := sealers[0].Seal([]byte("x"), nil)
	for i, s := range sealers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if _, err := s.Open(sealed, nil); err != nil {
			t.Fatalf("sealer %d has another key", i)
		}
	}
}

func TestLoadRefusesBadKeyFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		data []byte
		want string
	}{
		{"group readable", 0o640, make([]byte, KeySize), "group/other"},
		{"world readable", 0o604, make([]byte, KeySize), "group/other"},
		{"group writable", 0o620, make([]byte, KeySize), "group/other"},
		{"short", 0o600, make([]byte, 16), "16 bytes"},
		{"long", 0o600, make([]byte, 33), "33 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, KeyFile)
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir, noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want error containing %q", err, tc.want)
			}
			// Refusing must not replace the key: the bytes are unchanged.
			if got, _ := os.ReadFile(p); !bytes.Equal(got, tc.data) {
				t.Fatal("key file was rewritten")
			}
		})
	}
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "elsewhere")
		os.WriteFile(target, make([]byte, KeySize), 0o600)
		os.Symlink(target, filepath.Join(dir, KeyFile))
		if _, err := Load(dir, noEnv); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("Load: %v", err)
		}
	})
}

func TestLoadFromEnv(t *testing.T) {
	key := bytes.Repeat([]byte{9}, KeySize)
	env := func(k string) string {
		if k == EnvKey {
			return base64.StdEncoding.EncodeToString(key)
		}
		return ""
	}
	dir := t.TempDir()
	s, err := Load(dir, env)
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := New(key)
	sealed, _ := direct.Seal([]byte("v"), nil)
	if _, err := s.Open(sealed, nil); err != nil {
		t.Fatal("env key not used")
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !os.IsNotExist(err) {
		t.Fatal("a key file was created although the env var is set")
	}
	for _, bad := range []string{"not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16))} {
		_, err := Load(dir, func(string) string { return bad })
		if err == nil || !strings.Contains(err.Error(), EnvKey) {
			t.Fatalf("env %q: %v", bad, err)
		}
	}
}

func FuzzOpen(f *testing.F) {
	s, _ := New(bytes.Repeat([]byte{7}, KeySize))
	// A fixed nonce, not Seal's random one: fuzz workers are separate
	// processes and must agree on the one genuine value.
	nonce := bytes.Repeat([]byte{3}, nonceSize)
	good := append([]byte{version1}, nonce...)
	good = s.aead.Seal(good, nonce, []byte("ghp_x"), additional(version1, []byte("account:1")))
	f.Add(good, []byte("account:1"))
	f.Add([]byte{}, []byte{})
	f.Add([]byte{1}, []byte("a"))
	f.Add(bytes.Repeat([]byte{1}, 40), []byte("account:1"))
	f.Fuzz(func(t *testing.T, sealed, aad []byte) {
		pt, err := s.Open(sealed, aad)
		if err != nil {
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("Open error %v is not ErrOpen", err)
			}
			return
		}
		// Anything that opens must be exactly what Seal would produce
		// around it: only the genuine value (or a forgery, which GCM
		// makes infeasible) gets here.
		if !bytes.Equal(sealed, good) || !bytes.Equal(aad, []byte("account:1")) || string(pt) != "ghp_x" {
			t.Fatalf("forged value opened: %x aad %q -> %q", sealed, aad, pt)
		}
	})
}

func BenchmarkSealOpen(b *testing.B) {
	s, _ := New(bytes.Repeat([]byte{7}, KeySize))
	pt := []byte("ghp_0123456789abcdefABCDEF0123456789abcd")
	for b.Loop() {
		c, _ := s.Seal(pt, []byte("account:1"))
		if _, err := s.Open(c, []byte("account:1")); err != nil {
			b.Fatal(err)
		}
	}
}
