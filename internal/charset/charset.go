// Package charset checks short identifiers (names, scopes, tokens) against
// byte classes: what the anchored regexps `^[first][rest]{min-1,max-1}$`
// did, without compiling regexps at start-up (every sbx process, each hook
// call and each box boot, pays for package init).
package charset

// Set is a class of bytes.
type Set [256]bool

// New builds a Set from a spec like "a-z0-9_-": single bytes and X-Y
// ranges; a '-' first or last is literal.
func New(spec string) *Set {
	var s Set
	for i := 0; i < len(spec); i++ {
		if i+2 < len(spec) && spec[i+1] == '-' {
			for c := int(spec[i]); c <= int(spec[i+2]); c++ {
				s[c] = true
			}
			i += 2
			continue
		}
		s[spec[i]] = true
	}
	return &s
}

// Is reports whether s is min to max bytes long, its first byte in first
// and every other byte in rest.
func Is(s string, min, max int, first, rest *Set) bool {
	if len(s) < min || len(s) > max || len(s) == 0 {
		return false
	}
	if !first[s[0]] {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest[s[i]] {
			return false
		}
	}
	return true
}
