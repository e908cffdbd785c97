package keys

// ParseAuthorizedKeys parses authorized_keys text: one key per line, blank
// lines and # comments allowed. It accepts ed25519, ecdsa (256/384/521), rsa
// of at least 2048 bits and the sk- security-key variants; anything else,
// options prefixes and certificates included, is an error naming the line.
func ParseAuthorizedKeys(text string) ([]Key, error) {
	return nil, errTODO
}
