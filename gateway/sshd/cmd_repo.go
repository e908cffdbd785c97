package sshd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// repoCmd groups what is done to a box's repositories.
func (c *call) repoCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "repo", Short: "Add a repository to a running box", GroupID: groupBoxes})
	add := c.boxCmd("add BOX REPO[@REF]", "Add a repository to a box: cloned with your account, in /workspace on the box's branch sbx/BOX", cobra.ExactArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			spec := fleet.ParseRepoSpec(rest[0])
			b, err := f.AddRepo(cmd.Context(), c.actor, box, spec)
			if err != nil {
				return err
			}
			r := b.Repos[len(b.Repos)-1]
			for _, x := range b.Repos {
				if strings.EqualFold(x.Name, spec.Repo) {
					r = x
				}
			}
			if wantJSON(cmd) {
				return done(cmd, "added", map[string]any{"box": b.Name, "repo": r}, "")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s to %s in /workspace/%s (branch %s; the box may push that branch only)\n", r.Name, b.Name, r.Dir, r.Branch)
			return nil
		})
	add.GroupID = ""
	add.Example = c.examples("repo add fix-the-flaky-3f2a1c acme/docs", "repo add fix-the-flaky-3f2a1c acme/docs@v2",
		"repo add --json fix-the-flaky-3f2a1c https://github.com/acme/docs")
	jsonFlag(add)
	cmd.AddCommand(add)
	return cmd
}
