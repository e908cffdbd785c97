// Package sshalgo is the gateway's SSH transport policy: the key exchanges,
// ciphers and MACs offered by default, and the names an operator may list
// instead (ssh.kex, ssh.ciphers, ssh.macs). The config checks the lists when
// it loads and the SSH front offers exactly them, so the two share this one
// place.
//
// The defaults are the modern set an outside audit (ssh-audit) passes:
// post-quantum and curve25519 key exchange, AEAD ciphers, and only
// encrypt-then-MAC MACs (used only if an operator adds a non-AEAD cipher).
// Left out on purpose: NIST-curve ECDH, SHA-1 key exchange, finite-field DH,
// AES-CTR, and the encrypt-and-MAC and SHA-1 MACs. An operator with old
// clients may list any name golang.org/x/crypto/ssh implements, weak ones
// included: that is a choice made in sbx.yaml, never a default.
package sshalgo

import (
	"fmt"
	"slices"
	"strings"

	gossh "golang.org/x/crypto/ssh"
)

// curve25519LibSSH is the pre-RFC name of curve25519-sha256, which
// x/crypto implements but does not export.
const curve25519LibSSH = "curve25519-sha256@libssh.org"

// Kind is one list of transport algorithms.
type Kind int

// The kinds an operator configures.
const (
	KeyExchange Kind = iota
	Cipher
	MAC
)

// String names the kind in errors.
func (k Kind) String() string {
	switch k {
	case KeyExchange:
		return "key exchange"
	case Cipher:
		return "cipher"
	case MAC:
		return "MAC"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Default returns the kind's modern list, in preference order.
func Default(k Kind) []string {
	switch k {
	case KeyExchange:
		// sntrup761x25519 would come next to ML-KEM, but x/crypto does
		// not implement it.
		return []string{gossh.KeyExchangeMLKEM768X25519, gossh.KeyExchangeCurve25519, curve25519LibSSH}
	case Cipher:
		return []string{gossh.CipherChaCha20Poly1305, gossh.CipherAES256GCM, gossh.CipherAES128GCM}
	case MAC:
		return []string{gossh.HMACSHA256ETM, gossh.HMACSHA512ETM}
	}
	return nil
}

// Implemented returns every name of the kind that x/crypto can offer:
// its supported and its insecure algorithms.
func Implemented(k Kind) []string {
	sup, insec := gossh.SupportedAlgorithms(), gossh.InsecureAlgorithms()
	switch k {
	case KeyExchange:
		return slices.Concat(sup.KeyExchanges, []string{curve25519LibSSH}, insec.KeyExchanges)
	case Cipher:
		return slices.Concat(sup.Ciphers, insec.Ciphers)
	case MAC:
		return slices.Concat(sup.MACs, insec.MACs)
	}
	return nil
}

// Check reports the first problem with names as the kind's list: empty
// (x/crypto would fall back to its own defaults, weak ones included), a
// name x/crypto does not implement, or a name listed twice. The error
// starts with the bad value, quoted.
func Check(k Kind, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf(`"": no %s listed: name at least one (default %s)`, k, strings.Join(Default(k), ","))
	}
	known := Implemented(k)
	for i, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("%q: not a %s golang.org/x/crypto/ssh implements (known: %s)", n, k, strings.Join(known, ","))
		}
		if slices.Contains(names[:i], n) {
			return fmt.Errorf("%q: listed twice", n)
		}
	}
	return nil
}
