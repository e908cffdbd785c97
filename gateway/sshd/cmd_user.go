package sshd

import (
	"fmt"

	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/keys"
)

func fingerprint(pk gossh.PublicKey) string { return gossh.FingerprintSHA256(pk) }

func (c *call) userCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:         "user",
		Short:       "Manage users (admins only)",
		Annotations: map[string]string{"access": accessAdmin},
	})

	var role string
	add := &cobra.Command{
		Use:   "add NAME [KEY…]",
		Short: "Add a user with SSH keys given as arguments or authorized_keys text on stdin",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := keys.ParseRole(role)
			if err != nil {
				return err
			}
			text, err := c.readKeys(cmd, args[1:])
			if err != nil {
				return err
			}
			u, ks, err := c.srv.Identity.AddUser(cmd.Context(), c.actor, args[0], r, text)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return done(cmd, "added", map[string]any{"user": u.Name, "role": string(u.Role), "keys": keyRows(ks)}, "")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s) with %d key(s)\n", u.Name, u.Role, len(ks))
			for _, k := range ks {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", k.Fingerprint, k.Comment)
			}
			return nil
		},
	}
	add.Flags().StringVar(&role, "role", string(keys.RoleOperator), "operator or admin")

	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a user with all their keys and API keys",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.srv.Identity.RemoveUser(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"user": args[0]}, "removed "+args[0])
		},
	}

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List users",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			users, err := c.srv.Identity.Users(cmd.Context())
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				type row struct {
					Name     string `json:"name"`
					Role     string `json:"role"`
					Disabled bool   `json:"disabled"`
					Created  string `json:"created"`
				}
				out := make([]row, 0, len(users))
				for _, u := range users {
					out = append(out, row{u.Name, string(u.Role), u.Disabled, stamp(u.Created)})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tROLE\tSTATE\tCREATED")
			for _, u := range users {
				state := "enabled"
				if u.Disabled {
					state = "disabled"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, u.Role, state, stamp(u.Created))
			}
			return tw.Flush()
		},
	}
	jsonFlag(ls)

	setDisabled := func(use, short, verb string, disabled bool) *cobra.Command {
		return jsonFlag(&cobra.Command{
			Use:     use + " NAME",
			Short:   short,
			Example: c.examples("user " + use + " bob"),
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := c.srv.Identity.SetDisabled(cmd.Context(), c.actor, args[0], disabled); err != nil {
					return err
				}
				return done(cmd, verb, map[string]any{"user": args[0]}, verb+" "+args[0])
			},
		})
	}
	add.Example = c.examples(`user add bob --role operator "$(cat bob.pub)"`, "user add carol < carol.pub", "user add --json dave < dave.pub")
	rm.Example = c.examples("user rm bob")
	ls.Example = c.examples("user ls", "user ls --json")
	jsonFlag(add)
	jsonFlag(rm)
	cmd.AddCommand(add, rm, ls,
		setDisabled("disable", "Disable a user (their keys and API keys stop working)", "disabled", true),
		setDisabled("enable", "Enable a disabled user", "enabled", false))
	return cmd
}

func (c *call) keyCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "key", Short: "Manage SSH keys (yours; admins: anyone's with --user)"})
	var user string
	target := func() string {
		if user == "" {
			return c.user.Name
		}
		return user
	}

	add := &cobra.Command{
		Use:   "add [KEY…]",
		Short: "Add SSH keys given as arguments or authorized_keys text on stdin",
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := c.readKeys(cmd, args)
			if err != nil {
				return err
			}
			ks, err := c.srv.Identity.AddKeys(cmd.Context(), c.actor, target(), text)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return done(cmd, "added", map[string]any{"user": target(), "keys": keyRows(ks)}, "")
			}
			for _, k := range ks {
				fmt.Fprintf(cmd.OutOrStdout(), "added %s %s to %s\n", k.Fingerprint, k.Comment, target())
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm FINGERPRINT",
		Short: "Remove an SSH key by its SHA256 fingerprint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.srv.Identity.RemoveKey(cmd.Context(), c.actor, target(), args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"user": target(), "fingerprint": args[0]},
				fmt.Sprintf("removed %s from %s", args[0], target()))
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List SSH keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ks, err := c.srv.Identity.Keys(cmd.Context(), c.actor, target())
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), keyRows(ks))
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "FINGERPRINT\tTYPE\tCOMMENT\tCREATED")
			for _, k := range ks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Fingerprint, k.Type, k.Comment, stamp(k.Created))
			}
			return tw.Flush()
		},
	}
	jsonFlag(ls)
	cmd.PersistentFlags().StringVar(&user, "user", "", "act on this user's keys (admins)")
	add.Example = c.examples("key add < ~/.ssh/id_ecdsa.pub", `key add "$(cat laptop.pub)"`, "key add --user bob < bob2.pub")
	rm.Example = c.examples("key rm SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s")
	ls.Example = c.examples("key ls", "key ls --user bob --json")
	jsonFlag(add)
	jsonFlag(rm)
	cmd.AddCommand(add, rm, ls)
	return cmd
}

// keyRow is an SSH key under --json.
type keyRow struct {
	Fingerprint string `json:"fingerprint"`
	Type        string `json:"type"`
	Comment     string `json:"comment"`
	Created     string `json:"created"`
}

func keyRows(ks []keys.Key) []keyRow {
	out := make([]keyRow, 0, len(ks))
	for _, k := range ks {
		out = append(out, keyRow{k.Fingerprint, k.Type, k.Comment, stamp(k.Created)})
	}
	return out
}
