package sshd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// maxStdinToken caps a token read from stdin.
const maxStdinToken = 4 << 10

func (c *call) accountCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "account", Short: "Manage your GitHub accounts (tokens the boxes' repos are reached with)"})

	var probe string
	add := &cobra.Command{
		Use:   "add NAME [--probe owner/repo] < token",
		Short: "Add a GitHub account; the token is read from stdin (never from the command line) and probed before it is saved",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if _, _, isPty := c.sess.Pty(); isPty {
				// A PTY would echo the token and hold the line open.
				return fmt.Errorf("account add: pipe the token on stdin without -t: echo \"$TOKEN\" | %s account add %s: %w",
					c.usagePrefix(), args[0], fleet.ErrInvalid)
			}
			data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxStdinToken+1))
			if err != nil {
				return fmt.Errorf("read the token from stdin: %w", err)
			}
			if len(data) > maxStdinToken {
				return fmt.Errorf("token on stdin: more than %d bytes: %w", maxStdinToken, fleet.ErrInvalid)
			}
			token := strings.TrimSpace(string(data))
			if token == "" {
				return fmt.Errorf("no token on stdin: echo \"$TOKEN\" | %s account add %s: %w", c.usagePrefix(), args[0], fleet.ErrInvalid)
			}
			a, err := f.AddAccount(cmd.Context(), c.actor, args[0], token, probe)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				fields := map[string]any{"account": a.Name, "host": a.Host, "token": a.Masked,
					"login": a.Identity.Login, "expires": stamp(a.Identity.Expires)}
				if a.Identity.HasScopes {
					fields["scopes"] = a.Identity.Scopes
				}
				if probe != "" {
					fields["probed"] = probe
				}
				return done(cmd, "added", fields, "")
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "added account %s (%s, token %s)\n", a.Name, a.Host, a.Masked)
			fmt.Fprintf(out, "  login    %s\n  scopes   %s\n  expires  %s\n", a.Identity.Login, a.Identity.ScopesText(), a.Identity.ExpiresText(c.srv.Now()))
			if probe != "" {
				fmt.Fprintf(out, "  probe    %s is readable with this token\n", probe)
			}
			return nil
		},
	}
	add.Flags().StringVar(&probe, "probe", "", "check the token can read this repository (owner/name) before saving")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your accounts: tokens masked, whose they are and when they expire (flagged a week before)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			list, err := f.Accounts(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			now := c.srv.Now()
			if wantJSON(cmd) {
				// login is "" and scopes null for an account added before
				// sbx kept them; scopes is null for a fine-grained token.
				type row struct {
					Name        string   `json:"name"`
					Host        string   `json:"host"`
					Token       string   `json:"token"`
					Default     bool     `json:"default"`
					Created     string   `json:"created"`
					Login       string   `json:"login"`
					Scopes      []string `json:"scopes"`
					Expires     string   `json:"expires"`
					Expired     bool     `json:"expired"`
					ExpiresSoon bool     `json:"expires_soon"`
				}
				out := make([]row, 0, len(list))
				for _, a := range list {
					id := a.Identity
					var scopes []string
					if id.HasScopes {
						scopes = append([]string{}, id.Scopes...)
					}
					out = append(out, row{a.Name, a.Host, a.Masked, a.Default, stamp(a.Created),
						id.Login, scopes, stamp(id.Expires), id.Expired(now), id.ExpiresSoon(now)})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			if len(list) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no accounts; add one with: echo \"$TOKEN\" | %s account add NAME\n", c.usagePrefix())
				return nil
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tHOST\tLOGIN\tTOKEN\tEXPIRES\tDEFAULT\tADDED")
			for _, a := range list {
				def := ""
				if a.Default {
					def = "yes"
				}
				login := a.Identity.Login
				if !a.Identity.Checked() {
					login = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Name, a.Host, login, a.Masked, a.Identity.ExpiresText(now), def, age(now, a.Created))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			// What to do about a token that stopped, or is about to stop,
			// working: on stderr, so stdout stays the table.
			for _, a := range list {
				if a.Identity.Expired(now) || a.Identity.ExpiresSoon(now) {
					fmt.Fprintf(cmd.ErrOrStderr(), "account %s: token expiry %s; replace it: %s account rm %s, then echo \"$NEW_TOKEN\" | %s account add %s\n",
						a.Name, a.Identity.ExpiresText(now), c.usagePrefix(), a.Name, c.usagePrefix(), a.Name)
				}
			}
			return nil
		},
	}
	jsonFlag(ls)

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove one of your accounts",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.RemoveAccount(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"account": args[0]}, "removed account "+args[0])
		},
	}
	def := &cobra.Command{
		Use:   "default NAME",
		Short: "Make an account your default",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.SetDefaultAccount(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "default", map[string]any{"account": args[0]}, "default account is "+args[0])
		},
	}
	add.Example = c.examples(`echo "$GITHUB_TOKEN" | {ssh} account add work`,
		`echo "$GITHUB_TOKEN" | {ssh} account add work --probe acme/widget --json`)
	ls.Example = c.examples("account ls", "account ls --json")
	rm.Example = c.examples("account rm work")
	def.Example = c.examples("account default work")
	for _, sub := range []*cobra.Command{add, rm, def} {
		jsonFlag(sub)
	}
	cmd.AddCommand(add, ls, rm, def)
	return cmd
}

func (c *call) poolCmd() *cobra.Command {
	var set int
	cmd := &cobra.Command{
		Use:         "pool [--set N]",
		Short:       "Show or size the warm pool of pre-booted boxes (admins only)",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{"access": accessAdmin},
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			var st fleet.PoolStatus
			if cmd.Flags().Changed("set") {
				st, err = f.SetPool(cmd.Context(), c.actor, set)
			} else {
				st, err = f.Pool(cmd.Context(), c.actor)
			}
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "warm pool: target %d, ready %d, booting %d\n", st.Target, st.Ready, st.Booting)
			return nil
		},
	}
	cmd.Flags().IntVar(&set, "set", 0, "keep this many boxes pre-booted")
	cmd.Example = c.examples("pool", "pool --set 2", "pool --json")
	jsonFlag(cmd)
	return cmd
}
