package sshd

import (
	"slices"

	"github.com/spf13/cobra"
)

// annotationGroup marks a command that only groups others (group).
const annotationGroup = "sbx.group"

// annotationRaw marks a command whose output is a box process's own bytes
// (attach, exec): the one kind of printing command without --json.
const annotationRaw = "sbx.raw"

// Command is one runnable command of the SSH command tree.
type Command struct {
	Path  string // e.g. "token create", without the root
	Admin bool   // admins only
}

// Commands lists every runnable command a session can reach (hidden test
// hooks included when the server has them), sorted by path. The access
// matrix test refuses a command it has no entry for.
func (s *Server) Commands() []Command {
	var out []Command
	var walk func(prefix string, cmd *cobra.Command)
	walk = func(prefix string, cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			path := prefix + sub.Name()
			if sub.Annotations[annotationGroup] == "" { // a group alone only prints its help
				out = append(out, Command{Path: path, Admin: needsAdmin(sub)})
			}
			walk(path+" ", sub)
		}
	}
	walk("", (&call{srv: s}).root())
	slices.SortFunc(out, func(a, b Command) int {
		if a.Path < b.Path {
			return -1
		}
		if a.Path > b.Path {
			return 1
		}
		return 0
	})
	return out
}
