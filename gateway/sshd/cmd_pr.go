package sshd

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/forge"
)

// The pull requests of a box's branches and the repositories an account
// reaches: pr BOX (open, or show the card), pr merge, pr close, repos.

func (c *call) prCmd() *cobra.Command {
	var req fleet.PRRequest
	var bodyFile string
	cmd := c.boxCmd("pr BOX [--repo R] [--title T] [--body-file -] [--draft] [--base B]",
		"Open a pull request from the box's branch (pushed from the box first), or show its card when one is open",
		cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			if bodyFile != "" {
				if bodyFile != "-" {
					return fmt.Errorf("--body-file %q: only - (stdin) is read: %w", bodyFile, fleet.ErrInvalid)
				}
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10+1))
				if err != nil {
					return fmt.Errorf("read the body from stdin: %w", err)
				}
				req.Body = string(b)
			}
			asked := req.Title != "" || req.Body != "" || req.Draft || req.Base != ""
			if !asked {
				// One open already: its card (what changed is pushed by
				// the agent, or by pr with a flag).
				card, err := f.PR(cmd.Context(), c.actor, box, req.Repo)
				if err == nil && card.State == forge.StateOpen {
					return writePR(cmd, card)
				}
				if err != nil && !errors.Is(err, fleet.ErrNotFound) {
					return err
				}
			}
			card, err := f.OpenPR(cmd.Context(), c.actor, box, req)
			if err != nil {
				return err
			}
			return writePR(cmd, card)
		})
	cmd.Flags().StringVar(&req.Repo, "repo", "", "the repository (owner/name); needed when the box holds more than one")
	cmd.Flags().StringVar(&req.Title, "title", "", "the title (default: the task's first line)")
	cmd.Flags().StringVar(&bodyFile, "body-file", "", "read the body from stdin (-); default: the task and the agent's last summary")
	cmd.Flags().BoolVar(&req.Draft, "draft", false, "open it as a draft")
	cmd.Flags().StringVar(&req.Base, "base", "", "the branch to merge into (default: the repository's default branch)")
	jsonFlag(cmd)
	cmd.Example = c.examples("pr fix-the-flaky-3f2a1c", `pr fix-the-flaky-3f2a1c --title "Fix the flaky test" --draft`,
		"pr --json fix-the-flaky-3f2a1c", "{ssh} pr --body-file - fix-the-flaky-3f2a1c < body.md")
	for _, sub := range []*cobra.Command{c.prMergeCmd(), c.prCloseCmd()} {
		sub.GroupID = "" // the groups are the root's
		cmd.AddCommand(sub)
	}
	return cmd
}

func (c *call) prMergeCmd() *cobra.Command {
	var repo string
	var squash, rebase bool
	cmd := c.boxCmd("merge BOX [--repo R] [--squash|--rebase]",
		"Merge the box's open pull request at the head its card showed (a merge commit unless --squash or --rebase)",
		cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			method := forge.Merge
			switch {
			case squash && rebase:
				return fmt.Errorf("--squash or --rebase, not both: %w", fleet.ErrInvalid)
			case squash:
				method = forge.Squash
			case rebase:
				method = forge.Rebase
			}
			card, err := f.MergePR(cmd.Context(), c.actor, box, repo, method)
			if err != nil {
				return err
			}
			return writePR(cmd, card)
		})
	cmd.Flags().StringVar(&repo, "repo", "", "the repository (owner/name); needed when the box holds more than one")
	cmd.Flags().BoolVar(&squash, "squash", false, "squash the commits into one")
	cmd.Flags().BoolVar(&rebase, "rebase", false, "rebase the commits onto the base")
	cmd.Example = c.examples("pr merge fix-the-flaky-3f2a1c", "pr merge --squash --json fix-the-flaky-3f2a1c")
	return jsonFlag(cmd)
}

func (c *call) prCloseCmd() *cobra.Command {
	var repo string
	cmd := c.boxCmd("close BOX [--repo R]", "Close the box's open pull request without merging", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			card, err := f.ClosePR(cmd.Context(), c.actor, box, repo)
			if err != nil {
				return err
			}
			return writePR(cmd, card)
		})
	cmd.Flags().StringVar(&repo, "repo", "", "the repository (owner/name); needed when the box holds more than one")
	cmd.Example = c.examples("pr close fix-the-flaky-3f2a1c", "pr close --json fix-the-flaky-3f2a1c")
	return jsonFlag(cmd)
}

// writePR prints a pull request's card (JSON with --json).
func writePR(cmd *cobra.Command, p fleet.PR) error {
	if wantJSON(cmd) {
		return writeJSON(cmd.OutOrStdout(), p)
	}
	w := cmd.OutOrStdout()
	if p.Opened {
		fmt.Fprintf(w, "opened %s#%d\n", p.Repo, p.Number)
	}
	tw := table(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("pull request", fmt.Sprintf("%s#%d", p.Repo, p.Number))
	state := p.State
	if p.Draft && state == forge.StateOpen {
		state += " (draft)"
	}
	row("state", state)
	row("title", oneLine(p.Title))
	row("head", fmt.Sprintf("%s at %s", p.Head, shortSHA(p.HeadSHA)))
	row("base", p.Base)
	checks := p.ChecksOutcome
	if checks == "" {
		checks = "none"
	}
	row("checks", checks)
	for _, ch := range p.Checks {
		line := ch.Name + ": " + ch.Outcome
		if ch.Detail != "" {
			line += " (" + ch.Detail + ")"
		}
		row("  check", oneLine(line))
	}
	row("review", strings.ReplaceAll(p.Review, "_", " "))
	if p.State == forge.StateOpen {
		row("mergeable", p.Mergeable)
	}
	if p.MergeSHA != "" {
		row("merged as", shortSHA(p.MergeSHA))
	}
	row("link", p.URL)
	return tw.Flush()
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func (c *call) reposCmd() *cobra.Command {
	var account string
	cmd := &cobra.Command{
		Use:     "repos [--account A] [QUERY]",
		Short:   "List the repositories an account can reach (your default account unless --account), searchable",
		Args:    cobra.MaximumNArgs(1),
		GroupID: groupBoxes,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			query := ""
			if len(args) == 1 {
				query = args[0]
			}
			list, err := f.Repos(cmd.Context(), c.actor, account, query)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no repositories")
				return nil
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "REPO\tVISIBILITY\tDEFAULT BRANCH\tUPDATED\tDESCRIPTION")
			now := c.srv.Now()
			for _, r := range list {
				vis := "public"
				if r.Private {
					vis = "private"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Repo, vis, r.DefaultBranch, age(now, r.Updated), oneLine(r.Description))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&account, "account", "", "the account to list for (default: your default account)")
	cmd.Example = c.examples("repos", "repos widget", "repos --account work --json acme/")
	return jsonFlag(cmd)
}
