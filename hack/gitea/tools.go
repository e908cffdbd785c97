//go:build tools

// Package tools pins Gitea, the git host the forge tests start
// (fleet/forge/giteatest): build.sh builds its main package into the cache.
package tools

import _ "code.gitea.io/gitea"
