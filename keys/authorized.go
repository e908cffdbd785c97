package keys

import (
	"bytes"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
)

// Limits on authorized_keys text, so one paste cannot make us parse megabytes.
const (
	MaxAuthorizedKeysBytes = 256 << 10
	MaxKeysPerText         = 100
	minRSABits             = 2048
	maxRSABits             = 16384
)

// acceptedTypes are the key types sbx accepts.
var acceptedTypes = map[string]bool{
	ssh.KeyAlgoED25519:    true,
	ssh.KeyAlgoECDSA256:   true,
	ssh.KeyAlgoECDSA384:   true,
	ssh.KeyAlgoECDSA521:   true,
	ssh.KeyAlgoRSA:        true,
	ssh.KeyAlgoSKED25519:  true,
	ssh.KeyAlgoSKECDSA256: true,
}

// ParseAuthorizedKeys parses authorized_keys text: one key per line, blank
// lines and # comments allowed. It accepts ed25519, ecdsa (256/384/521), rsa
// of at least 2048 bits and the sk- security-key variants; anything else,
// options prefixes and certificates included, is an error naming the line.
// The same key twice is an error too.
func ParseAuthorizedKeys(text string) ([]Key, error) {
	if len(text) > MaxAuthorizedKeysBytes {
		return nil, fmt.Errorf("authorized keys text is %d bytes, more than %d: %w", len(text), MaxAuthorizedKeysBytes, ErrInvalid)
	}
	var out []Key
	seen := map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseAuthorizedKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if prev, dup := seen[k.Fingerprint]; dup {
			return nil, fmt.Errorf("line %d: key %s is the same as line %d: %w", n, k.Fingerprint, prev, ErrInvalid)
		}
		seen[k.Fingerprint] = n
		out = append(out, k)
		if len(out) > MaxKeysPerText {
			return nil, fmt.Errorf("more than %d keys: %w", MaxKeysPerText, ErrInvalid)
		}
	}
	return out, nil
}

// ParseAuthorizedKey parses one authorized_keys line ("type base64
// [comment]") and applies ParseAuthorizedKeys's rules.
func ParseAuthorizedKey(line string) (Key, error) {
	line = strings.TrimSpace(line)
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return Key{}, fmt.Errorf("empty line: %w", ErrInvalid)
	}
	typ := fields[0]
	switch {
	case acceptedTypes[typ]:
	case typ == "ssh-dss":
		return Key{}, fmt.Errorf("DSA keys (ssh-dss) are refused; use ed25519: %w", ErrInvalid)
	case strings.Contains(typ, "-cert-v01@openssh.com"):
		return Key{}, fmt.Errorf("certificates (%q) are refused; give the plain public key: %w", short(typ), ErrInvalid)
	default:
		if _, _, opts, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil && len(opts) > 0 {
			return Key{}, fmt.Errorf("options before the key (%q) are not supported; give just \"type key comment\": %w", short(fields[0]), ErrInvalid)
		}
		return Key{}, fmt.Errorf("not an SSH public key (unknown type %q): %w", short(typ), ErrInvalid)
	}
	if len(fields) < 2 {
		return Key{}, fmt.Errorf("%s key has no base64 data: %w", typ, ErrInvalid)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return Key{}, fmt.Errorf("%s key data is not valid base64: %w", typ, ErrInvalid)
	}
	pk, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return Key{}, fmt.Errorf("%s key data does not parse (%v): %w", typ, err, ErrInvalid)
	}
	if pk.Type() != typ {
		return Key{}, fmt.Errorf("key says %s but its data is %q: %w", typ, short(pk.Type()), ErrInvalid)
	}
	if !bytes.Equal(pk.Marshal(), blob) {
		return Key{}, fmt.Errorf("%s key data has trailing bytes: %w", typ, ErrInvalid)
	}
	if typ == ssh.KeyAlgoRSA {
		cpk, ok := pk.(ssh.CryptoPublicKey)
		if !ok {
			return Key{}, fmt.Errorf("rsa key: unexpected type %T: %w", pk, ErrInvalid)
		}
		rk, ok := cpk.CryptoPublicKey().(*rsa.PublicKey)
		if !ok {
			return Key{}, fmt.Errorf("rsa key: unexpected type %T: %w", cpk.CryptoPublicKey(), ErrInvalid)
		}
		if bits := rk.N.BitLen(); bits < minRSABits || bits > maxRSABits {
			return Key{}, fmt.Errorf("rsa key has %d bits; want %d to %d: %w", bits, minRSABits, maxRSABits, ErrInvalid)
		}
	}
	return Key{
		Fingerprint: ssh.FingerprintSHA256(pk),
		Type:        typ,
		Comment:     cleanComment(strings.Join(fields[2:], " ")),
		PublicKey:   pk,
	}, nil
}

// short keeps error messages one short line even for hostile input.
func short(s string) string {
	const max = 40
	s = strings.ToValidUTF8(s, "?")
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// maxComment bounds a key comment.
const maxComment = 256

// cleanComment replaces control characters (terminal escapes would reach
// whoever lists the keys over SSH) and invalid UTF-8 with '?', and bounds the
// length.
func cleanComment(c string) string {
	c = audit.Printable(c)
	if len(c) > maxComment {
		c = strings.ToValidUTF8(c[:maxComment], "")
	}
	return c
}
