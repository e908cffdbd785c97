package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"strings"
)

// API tokens look like sbx_<id>_<secret>: the id (8 base62 characters) finds
// the row, the secret (40 base62 characters, about 238 bits) proves
// possession. Only the SHA-256 of the whole token is stored.
const (
	TokenPrefix    = "sbx_"
	tokenIDLen     = 8
	tokenSecretLen = 40
	minSecretLen   = 32
	maxTokenLen    = 128
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomBase62 returns n characters drawn uniformly from base62.
func randomBase62(n int) string {
	var b strings.Builder
	b.Grow(n)
	buf := make([]byte, 64)
	for b.Len() < n {
		rand.Read(buf) // never fails (crypto/rand panics rather than return an error)
		for _, c := range buf {
			// 248 = 4*62: reject the tail so every character is equally likely.
			if c < 248 && b.Len() < n {
				b.WriteByte(base62[c%62])
			}
		}
	}
	return b.String()
}

func isBase62(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// newToken returns a fresh token and its id.
func newToken() (token, id string) {
	id = randomBase62(tokenIDLen)
	return TokenPrefix + id + "_" + randomBase62(tokenSecretLen), id
}

// hashToken is what the store keeps.
func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// ParseToken checks a token's shape (sbx_<8 base62>_<at least 32 base62>) and
// returns its id. The error never echoes the token.
func ParseToken(token string) (id string, err error) {
	if len(token) > maxTokenLen {
		return "", fmt.Errorf("api key is longer than %d characters: %w", maxTokenLen, ErrBadToken)
	}
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", fmt.Errorf("api key does not start with %q: %w", TokenPrefix, ErrBadToken)
	}
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || len(id) != tokenIDLen || !isBase62(id) {
		return "", fmt.Errorf("api key id is not %d base62 characters: %w", tokenIDLen, ErrBadToken)
	}
	if len(secret) < minSecretLen || !isBase62(secret) {
		return "", fmt.Errorf("api key secret is not at least %d base62 characters: %w", minSecretLen, ErrBadToken)
	}
	return id, nil
}
