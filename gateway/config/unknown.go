package config

import (
	"slices"
	"strings"
)

// UnknownEnv is an SBX_ variable that neither the configuration nor any
// other part of sbx reads: most likely a typo, so it is warned about at
// start and otherwise ignored.
type UnknownEnv struct {
	Name string
	// Suggestion is the known name closest to Name, or "" when none is
	// close enough to be the one meant.
	Suggestion string
}

// UnknownEnvs lists the SBX_ variables of environ (os.Environ form) that
// nothing reads, in name order, each with the known name it may have meant.
// An empty variable counts as unset and is not listed.
func UnknownEnvs(environ []string) []UnknownEnv {
	known := envNames()
	var out []UnknownEnv
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || value == "" || !strings.HasPrefix(name, EnvPrefix) || slices.Contains(known, name) {
			continue
		}
		out = append(out, UnknownEnv{Name: name, Suggestion: Suggest(name, known)})
	}
	slices.SortFunc(out, func(a, b UnknownEnv) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b UnknownEnv) bool { return a.Name == b.Name })
}

// Suggest returns the name in known closest to name by edit distance
// (case-insensitive; a swap of two neighbours counts as one edit), or "" when
// the closest is too far to be a typo of it: more edits than a third of the
// name past SBX_, and never more than 3. Ties go to the earlier name in known.
func Suggest(name string, known []string) string {
	limit := min(3, max(1, len([]rune(strings.TrimPrefix(name, EnvPrefix)))/3))
	best, bestDist := "", limit+1
	for _, k := range known {
		if d := editDistance(strings.ToUpper(name), strings.ToUpper(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of adjacent runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows of the dynamic programme: two back (for swaps), one back,
	// and the current one.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
