package sshd

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/keys"
)

func (c *call) loginCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "login [--user U]",
		Short: "Print a one-time link that signs you in to the web console (single use, 5 minutes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.srv.WebURL == nil {
				return errors.New("this gateway serves no web console")
			}
			target := c.user.Name
			if user != "" {
				target = user
			}
			token, expires, err := c.srv.Identity.CreateLoginLink(cmd.Context(), c.actor, target)
			if err != nil {
				return err
			}
			link := keys.LoginURL(c.srv.WebURL(), token)
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"url": link, "user": target, "expires": stamp(expires)})
			}
			fmt.Fprintln(cmd.OutOrStdout(), link)
			fmt.Fprintf(cmd.ErrOrStderr(), "open it within %s (until %s); it works once and only for %s\n",
				keys.LoginTTL, expires.UTC().Format(time.RFC3339), target)
			return nil
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "admins: a link for another user")
	cmd.Example = c.examples("login", "login --user bob", "login --json")
	return jsonFlag(cmd)
}
