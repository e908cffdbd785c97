package sshd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/termtext"
)

// profileCmd is the project profiles' command family: ls, show, set, rm,
// default. Every rule is the core's (fleet.Profiles, SaveProfile,
// DeleteProfile, SetRepoProfile, ClearRepoProfile); this only reads flags.
func (c *call) profileCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "profile",
		Short: "Project profiles: named delegation settings (image, setup, dependency install, env, egress, size, max duration, agent); new --profile NAME",
		Long: "A project profile names what a box of a project needs: setup run as root before the agent, commands run as the agent after the clone " +
			"(dependency install), non-secret environment, egress (--allow entries and @presets), memory and vCPUs, max duration and the agent. " +
			"Choose one with new --profile NAME, or make it a repository's default (profile default REPO NAME). Your own profile shadows a site " +
			"profile (shared by an admin, --site) of the same name. The request's own flags override or add to the profile's.",
	})
	cmd.AddCommand(c.profileLsCmd(), c.profileShowCmd(), c.profileSetCmd(), c.profileRmCmd(), c.profileDefaultCmd())
	return cmd
}

func (c *call) profileLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List your profiles, the site's and your repositories' default profiles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			v, err := f.Profiles(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			out := cmd.OutOrStdout()
			if len(v.Profiles) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no profiles; make one with: %s profile set NAME --install 'npm ci'\n", c.usagePrefix())
			} else {
				w := table(out)
				fmt.Fprintln(w, "NAME\tSCOPE\tAGENT\tSIZE\tMAX\tINSTALL\tENV\tALLOW")
				for _, p := range v.Profiles {
					scope := p.Scope
					if p.Shadowed {
						scope += " (shadowed by yours)"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", p.Name, scope, orDash(p.Agent), profileSize(p.Profile), orDash(p.MaxDuration),
						len(p.Install), len(p.Env), orDash(termtext.String(strings.Join(p.Allow, " "))))
				}
				w.Flush()
			}
			if len(v.Defaults) > 0 {
				fmt.Fprintln(out)
				w := table(out)
				fmt.Fprintln(w, "REPOSITORY\tDEFAULT PROFILE")
				for _, d := range v.Defaults {
					fmt.Fprintf(w, "%s\t%s\n", d.Repo, d.Profile)
				}
				w.Flush()
			}
			return nil
		},
	}
	cmd.Example = c.examples("profile ls", "profile ls --json")
	jsonFlag(cmd)
	return cmd
}

func (c *call) profileShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a profile (yours, else the site's of that name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			p, err := f.Profile(cmd.Context(), c.actor, args[0])
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			w := table(cmd.OutOrStdout())
			row := func(k, v string) { fmt.Fprintf(w, "%s:\t%s\n", k, termtext.String(v)) }
			row("name", p.Name)
			row("scope", p.Scope)
			row("image", orDefault(p.Image))
			row("agent", orDefault(p.Agent))
			row("size", profileSize(p))
			row("max duration", orDefault(p.MaxDuration))
			row("allow", orDash(strings.Join(p.Allow, " ")))
			for _, e := range p.Env {
				row("env", e)
			}
			for _, i := range p.Install {
				row("install", i)
			}
			w.Flush()
			if p.Setup != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "setup (root):\n%s", termtext.String(p.Setup))
				if !strings.HasSuffix(p.Setup, "\n") {
					fmt.Fprintln(cmd.OutOrStdout())
				}
			}
			return nil
		},
	}
	cmd.Example = c.examples("profile show node", "profile show --json node")
	jsonFlag(cmd)
	return cmd
}

func (c *call) profileSetCmd() *cobra.Command {
	var site bool
	var img, setupFile, memory, cpus, maxDur, agentName string
	var install, env, allow []string
	cmd := &cobra.Command{
		Use:   "set NAME [--site] [--image I] [--setup-file -] [--install CMD]… [--env K=V]… [--allow X]… [--memory MiB] [--cpus N] [--max-duration D] [--agent A]",
		Short: "Create or replace a profile (yours; --site: shared with every user, admins only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			p := fleet.Profile{Name: args[0], Image: img, Install: install, Env: env, Allow: allow, MaxDuration: maxDur, Agent: agentName}
			if site {
				p.Scope = fleet.ScopeSite
			}
			switch setupFile {
			case "":
			case "-":
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), fleet.MaxSetupBytes+1))
				if err != nil {
					return fmt.Errorf("read the setup script from stdin: %w", err)
				}
				p.Setup = string(b)
			default:
				return fmt.Errorf("--setup-file %q: only - (stdin) is read over SSH: %w", setupFile, fleet.ErrInvalid)
			}
			if p.MemoryMiB, err = fleet.ParseMemory(memory); err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			if p.VCPUs, err = fleet.ParseCPUs(cpus); err != nil {
				return fmt.Errorf("--cpus: %w", err)
			}
			saved, err := f.SaveProfile(cmd.Context(), c.actor, p)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), saved)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "saved %s profile %s; use it with: %s new --profile %s TASK\n", saved.Scope, saved.Name, c.usagePrefix(), saved.Name)
			return err
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&site, "site", false, "a site profile, shared with every user (admins only)")
	fl.StringVar(&img, "image", "", "the box image (default: the gateway's)")
	fl.StringVar(&setupFile, "setup-file", "", "- reads a shell script from stdin, run as root before the agent (packages, toolchains)")
	fl.StringArrayVar(&install, "install", nil, "a command run as the agent in the first repository after the clone (dependency install); repeat for more, run in order")
	fl.StringArrayVar(&env, "env", nil, "KEY=VALUE non-secret environment for the agent; repeat for more")
	fl.StringArrayVar(&allow, "allow", nil, "an egress entry (example.com, *.example.com, example.com:8443) or a preset (@npm); repeat for more")
	fl.StringVar(&memory, "memory", "", "the box's memory in MiB (at most box.max_memory_mib)")
	fl.StringVar(&cpus, "cpus", "", "the box's vCPUs (at most box.max_cpus)")
	fl.StringVar(&maxDur, "max-duration", "", "how long the box may run, e.g. 2h (at most box.max_lifetime)")
	fl.StringVar(&agentName, "agent", "", "agent profile: claude (default) or script")
	cmd.Example = c.examples(`profile set node --install 'npm ci' --env NODE_ENV=test --allow @npm`,
		`profile set py --setup-file - --install 'pip install .' --allow @pypi < setup.sh`,
		`profile set --site big --memory 4096 --cpus 2 --max-duration 4h`)
	jsonFlag(cmd)
	return cmd
}

func (c *call) profileRmCmd() *cobra.Command {
	var site bool
	cmd := &cobra.Command{
		Use:   "rm NAME [--site]",
		Short: "Remove one of your profiles (--site: a site profile, admins only)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.DeleteProfile(cmd.Context(), c.actor, args[0], site); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"profile": args[0], "site": site}, "removed profile "+args[0])
		},
	}
	cmd.Flags().BoolVar(&site, "site", false, "the site profile of that name (admins only)")
	cmd.Example = c.examples("profile rm node", "profile rm --site big")
	jsonFlag(cmd)
	return cmd
}

func (c *call) profileDefaultCmd() *cobra.Command {
	var clear bool
	cmd := &cobra.Command{
		Use:   "default REPO [NAME|--clear]",
		Short: "Show, set or clear the profile your delegations of REPO use when they name none",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			switch {
			case clear && len(args) == 2:
				return fmt.Errorf("--clear takes no profile name: %w", fleet.ErrInvalid)
			case clear:
				d, err := f.ClearRepoProfile(cmd.Context(), c.actor, args[0])
				if err != nil {
					return err
				}
				return done(cmd, "cleared", map[string]any{"repo": d.Repo, "profile": ""}, d.Repo+" has no default profile")
			case len(args) == 2:
				d, err := f.SetRepoProfile(cmd.Context(), c.actor, args[0], args[1])
				if err != nil {
					return err
				}
				return done(cmd, "set", map[string]any{"repo": d.Repo, "profile": d.Profile},
					fmt.Sprintf("delegations of %s use profile %s unless they name another", d.Repo, d.Profile))
			}
			v, err := f.Profiles(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			repo := strings.TrimSpace(args[0])
			d := fleet.RepoDefault{Repo: repo}
			for _, x := range v.Defaults {
				if x.Repo == repo {
					d = x
				}
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), d)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", termtext.String(d.Repo), orDash(d.Profile))
			return err
		},
	}
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the repository's default")
	cmd.Example = c.examples("profile default acme/widget node", "profile default acme/widget", "profile default acme/widget --clear")
	jsonFlag(cmd)
	return cmd
}

// profileSize is a profile's memory and vCPUs for people.
func profileSize(p fleet.Profile) string {
	if p.MemoryMiB == 0 && p.VCPUs == 0 {
		return "default"
	}
	m, n := "default", "default"
	if p.MemoryMiB > 0 {
		m = fmt.Sprintf("%dMiB", p.MemoryMiB)
	}
	if p.VCPUs > 0 {
		n = fmt.Sprintf("%dcpu", p.VCPUs)
	}
	return m + "/" + n
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}
