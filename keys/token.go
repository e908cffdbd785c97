package keys

// TokenPrefix starts every API token: sbx_<8-char id>_<secret>.
const TokenPrefix = "sbx_"

// ParseToken checks a token's shape and returns its id.
func ParseToken(token string) (id string, err error) {
	return "", errTODO
}
