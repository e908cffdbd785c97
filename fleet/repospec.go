package fleet

import "strings"

// ParseRepoSpec reads REPO[@REF], as people type it (SSH's `repo add`, the
// TUI's add-a-repository prompt): outer spaces dropped, then split at the
// last @ (refs hold none); an @ first or last is left in Repo, where the
// core's checks refuse it, as they refuse a URL with credentials in it.
func ParseRepoSpec(s string) RepoSpec {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '@'); i > 0 && i < len(s)-1 {
		return RepoSpec{Repo: s[:i], Ref: s[i+1:]}
	}
	return RepoSpec{Repo: s}
}
