package sshd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// titleCmd sets a box's title; rename is the same command (the box's name,
// which every command takes, never changes).
func (c *call) titleCmd() *cobra.Command {
	cmd := c.boxCmd("title BOX TEXT…", "Set a box's title (its name stays the same)", cobra.MinimumNArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			b, err := f.SetTitle(cmd.Context(), c.actor, box, strings.Join(rest, " "))
			if err != nil {
				return err
			}
			return done(cmd, "titled", map[string]any{"box": b.Name, "title": b.Title},
				fmt.Sprintf("box %s is titled %q (its name stays %s)", b.Name, b.Title.String(), b.Name))
		})
	cmd.Aliases = []string{"rename"}
	cmd.Long = fmt.Sprintf("Set a box's title: 1 to %d printable characters on one line, shown by ls, status, the TUI, the web and MCP, and searched by ls QUERY. "+
		"The box's name never changes (rename is the same command): every command keeps taking the name.", fleet.MaxTitleLen)
	cmd.Example = c.examples(`title fix-the-flaky-3f2a1c "flaky test in the parser"`, `rename fix-the-flaky-3f2a1c "parser: flaky test"`)
	return jsonFlag(cmd)
}
