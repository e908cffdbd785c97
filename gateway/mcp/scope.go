package mcp

import (
	"fmt"
	"slices"
	"strings"
)

// Scopes an API key may carry for MCP.
const (
	ScopeRead  = "read"
	ScopeWrite = "write"
)

// scopes is what a key may do here.
type scopes struct {
	read, write bool
	list        string // as the key has them, for messages
}

// scopesOf reads a key's scopes: none means unrestricted (keys created
// without --scope), "write" implies "read".
func scopesOf(s []string) scopes {
	if len(s) == 0 {
		return scopes{read: true, write: true, list: "(none: unrestricted)"}
	}
	w := slices.Contains(s, ScopeWrite)
	return scopes{read: w || slices.Contains(s, ScopeRead), write: w, list: strings.Join(s, ",")}
}

// allow says whether a key with sc may call tool; the error names the scope
// it lacks and how to get it.
func (sc scopes) allow(tool string, write bool) error {
	switch {
	case write && !sc.write:
		return denied(fmt.Sprintf("tool %s changes boxes and needs an API key with the %q scope; this key has scopes %s. Create one with `ssh <gateway> token create --scope write` and use it instead", tool, ScopeWrite, sc.list))
	case !sc.read:
		return denied(fmt.Sprintf("tool %s needs an API key with the %q or %q scope; this key has scopes %s. Create one with `ssh <gateway> token create --scope read`", tool, ScopeRead, ScopeWrite, sc.list))
	}
	return nil
}
