package keys_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/keys"
)

// testKeys are generated once per test binary; RSA generation is slow.
var testKeys = sync.OnceValue(func() map[string]ssh.PublicKey {
	m := map[string]ssh.PublicKey{}
	must := func(pk ssh.PublicKey, err error) ssh.PublicKey {
		if err != nil {
			panic(err)
		}
		return pk
	}
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	m["ed25519"] = must(ssh.NewPublicKey(edPub))
	for name, c := range map[string]elliptic.Curve{"ecdsa256": elliptic.P256(), "ecdsa384": elliptic.P384(), "ecdsa521": elliptic.P521()} {
		k, _ := ecdsa.GenerateKey(c, rand.Reader)
		m[name] = must(ssh.NewPublicKey(&k.PublicKey))
	}
	for name, bits := range map[string]int{"rsa2048": 2048, "rsa2047": 2047, "rsa1024": 1024} {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			panic(err)
		}
		m[name] = must(ssh.NewPublicKey(&k.PublicKey))
	}
	return m
})

func authLine(pk ssh.PublicKey, comment string) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk))) + " " + comment
}

// wireLine builds an authorized_keys line from raw wire fields, for key types
// Go cannot generate (security keys, DSA).
func wireLine(typ string, fields ...any) string {
	var b []byte
	str := func(s []byte) {
		b = append(b, byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s)))
		b = append(b, s...)
	}
	str([]byte(typ))
	for _, f := range fields {
		switch v := f.(type) {
		case string:
			str([]byte(v))
		case []byte:
			str(v)
		case *big.Int:
			mp := v.Bytes()
			if len(mp) > 0 && mp[0]&0x80 != 0 {
				mp = append([]byte{0}, mp...)
			}
			str(mp)
		}
	}
	return typ + " " + base64.StdEncoding.EncodeToString(b) + " test"
}

func skEd25519Line() string {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	return wireLine(ssh.KeyAlgoSKED25519, []byte(pub), "ssh:")
}

func skECDSALine() string {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ek, err := k.PublicKey.ECDH()
	if err != nil {
		panic(err)
	}
	pt := ek.Bytes() // uncompressed point, the SSH wire encoding
	return wireLine(ssh.KeyAlgoSKECDSA256, "nistp256", pt, "ssh:")
}

func dsaLine() string {
	// A syntactically valid DSA key; its numbers need not be a real group
	// since the type alone is refused.
	return wireLine("ssh-dss", big.NewInt(23), big.NewInt(11), big.NewInt(4), big.NewInt(8))
}

func certLine(t *testing.T) string {
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	ca, err := ssh.NewSignerFromKey(caPriv)
	if err != nil {
		t.Fatal(err)
	}
	cert := &ssh.Certificate{Key: testKeys()["ed25519"], CertType: ssh.UserCert, ValidPrincipals: []string{"alice"},
		ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))
}

func TestParseAuthorizedKeysAccepts(t *testing.T) {
	k := testKeys()
	tests := []struct {
		name, text string
		types      []string
	}{
		{"ed25519", authLine(k["ed25519"], "alice@laptop"), []string{"ssh-ed25519"}},
		{"ed25519 no comment", strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k["ed25519"]))), []string{"ssh-ed25519"}},
		{"ecdsa 256", authLine(k["ecdsa256"], "c"), []string{"ecdsa-sha2-nistp256"}},
		{"ecdsa 384", authLine(k["ecdsa384"], "c"), []string{"ecdsa-sha2-nistp384"}},
		{"ecdsa 521", authLine(k["ecdsa521"], "c"), []string{"ecdsa-sha2-nistp521"}},
		{"rsa 2048", authLine(k["rsa2048"], "c"), []string{"ssh-rsa"}},
		{"sk ed25519", skEd25519Line(), []string{ssh.KeyAlgoSKED25519}},
		{"sk ecdsa", skECDSALine(), []string{ssh.KeyAlgoSKECDSA256}},
		{"several lines, comments, blanks, CRLF", "# my keys\r\n\r\n" + authLine(k["ed25519"], "a") + "\r\n   \n" +
			authLine(k["ecdsa256"], "b c d") + "\n# end\n", []string{"ssh-ed25519", "ecdsa-sha2-nistp256"}},
		{"empty", "", nil},
		{"only comments", "# nothing\n\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keys.ParseAuthorizedKeys(tt.text)
			if err != nil {
				t.Fatalf("ParseAuthorizedKeys: %v", err)
			}
			if len(got) != len(tt.types) {
				t.Fatalf("got %d keys, want %d", len(got), len(tt.types))
			}
			for i, k := range got {
				if k.Type != tt.types[i] {
					t.Errorf("key %d type %q, want %q", i, k.Type, tt.types[i])
				}
				if k.Fingerprint != ssh.FingerprintSHA256(k.PublicKey) || !strings.HasPrefix(k.Fingerprint, "SHA256:") {
					t.Errorf("key %d fingerprint %q", i, k.Fingerprint)
				}
			}
		})
	}
	for in, want := range map[string]string{
		"alice  at   laptop":          "alice at laptop",
		"evil\x1b[2J\x07bell":         "evil?[2J?bell",
		"c1\u009bcontrol \xff\xfe ok": "c1?control ? ok",
		"naïve café":                  "naïve café",
		strings.Repeat("é", 200):      strings.Repeat("é", 128),
	} {
		got, err := keys.ParseAuthorizedKeys(authLine(k["ed25519"], in))
		if err != nil || got[0].Comment != want {
			t.Errorf("comment %q: got %q (%v), want %q", in, got[0].Comment, err, want)
		}
	}
}

func TestParseAuthorizedKeysRefuses(t *testing.T) {
	k := testKeys()
	ed := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k["ed25519"])))
	edB64 := strings.Fields(ed)[1]
	blob, _ := base64.StdEncoding.DecodeString(edB64)
	tests := []struct {
		name, text, want string
	}{
		{"dsa", dsaLine(), "line 1: DSA keys"},
		{"rsa 1024", authLine(k["rsa1024"], "c"), "line 1: rsa key has 1024 bits"},
		{"rsa 2047", authLine(k["rsa2047"], "c"), "line 1: rsa key has 2047 bits"},
		{"certificate", certLine(t), "line 1: certificates"},
		{"from= option", `from="10.0.0.1" ` + ed, "line 1: options before the key"},
		{"command= option", `command="/bin/sh",no-pty ` + ed, "line 1: options before the key"},
		{"restrict option", `restrict ` + ed, "line 1: options before the key"},
		{"garbage", "hello world", `line 1: not an SSH public key (unknown type "hello")`},
		{"type only", "ssh-ed25519", "line 1: ssh-ed25519 key has no base64 data"},
		{"bad base64", "ssh-ed25519 !!!notbase64", "line 1: ssh-ed25519 key data is not valid base64"},
		{"truncated blob", "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob[:len(blob)-5]), "line 1: ssh-ed25519 key data does not parse"},
		{"trailing bytes", "ssh-ed25519 " + base64.StdEncoding.EncodeToString(append(blob, 1, 2, 3)), "line 1: ssh-ed25519 key data does not parse"},
		{"type label mismatch", "ssh-rsa " + edB64, `line 1: key says ssh-rsa but its data is "ssh-ed25519"`},
		{"private key pasted", "-----BEGIN OPENSSH PRIVATE KEY-----", "line 1: not an SSH public key"},
		{"bad second line", ed + "\nssh-ed25519 AAAA", "line 2: ssh-ed25519 key data does not parse"},
		{"duplicate", ed + " a\n\n" + ed + " b", "line 3: key " + ssh.FingerprintSHA256(k["ed25519"]) + " is the same as line 1"},
		{"too big", strings.Repeat("#", keys.MaxAuthorizedKeysBytes+1), "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keys.ParseAuthorizedKeys(tt.text)
			if err == nil {
				t.Fatalf("accepted %d keys, want error %q", len(got), tt.want)
			}
			if !errors.Is(err, keys.ErrInvalid) {
				t.Errorf("error %q is not ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

func FuzzParseAuthorizedKeys(f *testing.F) {
	k := testKeys()
	f.Add(authLine(k["ed25519"], "a"))
	f.Add(authLine(k["rsa2048"], "a") + "\n" + authLine(k["ecdsa384"], "b"))
	f.Add(`from="x" ` + authLine(k["ed25519"], ""))
	f.Add(skEd25519Line())
	f.Add(dsaLine())
	f.Add("# c\n\nssh-ed25519 AAAA")
	f.Fuzz(func(t *testing.T, text string) {
		ks, err := keys.ParseAuthorizedKeys(text)
		if err != nil {
			if !errors.Is(err, keys.ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("multi-line error: %q", err)
			}
			return
		}
		for _, k := range ks {
			if k.Fingerprint != ssh.FingerprintSHA256(k.PublicKey) {
				t.Fatalf("fingerprint %s does not match key", k.Fingerprint)
			}
			if k.PublicKey.Type() != k.Type {
				t.Fatalf("type %s, key is %s", k.Type, k.PublicKey.Type())
			}
			switch k.Type {
			case "ssh-dss", ssh.CertAlgoED25519v01, ssh.CertAlgoRSAv01:
				t.Fatalf("accepted refused type %s", k.Type)
			}
			for _, r := range k.Comment {
				if r < 0x20 || r == 0x7f {
					t.Fatalf("comment %q keeps a control character", k.Comment)
				}
			}
			// What we accept round-trips.
			again, err := keys.ParseAuthorizedKey(string(ssh.MarshalAuthorizedKey(k.PublicKey)))
			if err != nil || again.Fingerprint != k.Fingerprint {
				t.Fatalf("accepted key does not round-trip: %v", err)
			}
		}
	})
}
