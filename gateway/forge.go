package gateway

import (
	"fmt"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
)

// newForge is the API of the git host git.kind names at git.host, for the
// core's pull requests and repository lists.
func newForge(kind, host string) (forge.Kind, forge.Forge, error) {
	k, err := forge.ParseKind(kind)
	if err != nil {
		return "", nil, fmt.Errorf("git.kind: %w", err)
	}
	base, err := accounts.ParseHost(host)
	if err != nil {
		return "", nil, fmt.Errorf("git.host: %w", err)
	}
	if k == forge.Gitea {
		return k, forge.NewGitea(base, nil), nil
	}
	f, err := forge.NewGitHub(base, nil)
	if err != nil {
		return "", nil, fmt.Errorf("git.host: %w", err)
	}
	return k, f, nil
}
