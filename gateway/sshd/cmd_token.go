package sshd

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

func (c *call) tokenCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "token", Short: "Manage your API keys (for HTTP and MCP)"})

	var name string
	var expires time.Duration
	var scopes []string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key; it is shown once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expires < 0 {
				return fmt.Errorf("--expires %s: must not be negative: %w", expires, keys.ErrInvalid)
			}
			if name == "" {
				name = "ssh-" + c.srv.Now().UTC().Format("20060102-150405")
			}
			token, k, err := c.srv.Identity.CreateAPIKey(cmd.Context(), c.actor, c.user.Name, name, scopes, expires)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), map[string]string{
					"token": token, "id": k.ID, "name": k.Name, "expires": stamp(k.Expires)})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", token)
			fmt.Fprintf(cmd.ErrOrStderr(), "API key %s created (expires %s). It is shown once: store it now.\n", k.ID, stamp(k.Expires))
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "", "a label for the key (default ssh-<time>)")
	create.Flags().DurationVar(&expires, "expires", 720*time.Hour, "lifetime; 0 means it never expires")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "the key's scopes: read, write (read and change boxes), tokens (manage API keys); default read,write")
	jsonFlag(create)

	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your API keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := c.srv.Identity.APIKeys(cmd.Context(), c.actor, c.user.Name)
			if err != nil {
				return err
			}
			if lsJSON {
				type row struct {
					ID       string   `json:"id"`
					Name     string   `json:"name"`
					Scopes   []string `json:"scopes"`
					Created  string   `json:"created"`
					Expires  string   `json:"expires"`
					Revoked  string   `json:"revoked"`
					LastUsed string   `json:"last_used"`
				}
				out := make([]row, 0, len(list))
				for _, k := range list {
					out = append(out, row{k.ID, k.Name, k.Scopes, stamp(k.Created), stamp(k.Expires), stamp(k.Revoked), stamp(k.LastUsed)})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tEXPIRES\tREVOKED\tLAST USED")
			for _, k := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","),
					stamp(k.Created), stamp(k.Expires), stamp(k.Revoked), stamp(k.LastUsed))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")

	rm := &cobra.Command{
		Use:   "rm ID",
		Short: "Revoke one of your API keys",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.srv.Identity.RevokeAPIKey(cmd.Context(), c.actor, c.user.Name, args[0]); err != nil {
				return err
			}
			return done(cmd, "revoked", map[string]any{"id": args[0]}, "revoked "+args[0])
		},
	}
	create.Example = c.examples("token create --name ci --expires 720h", "token create --scope read --json",
		`curl -H "Authorization: Bearer $({ssh} token create --name probe)" http://127.0.0.1:8080/api/v1/whoami`)
	ls.Example = c.examples("token ls", "token ls --json")
	rm.Example = c.examples("token rm 3f2a1c9d")
	jsonFlag(rm)
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func (c *call) auditCmd() *cobra.Command {
	var user, since string
	var limit int
	cmd := &cobra.Command{
		Use:         "audit",
		Short:       "List audit rows, newest first (admins only)",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{"access": accessAdmin},
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := audit.Filter{User: user, Limit: limit}
			if since != "" {
				t, err := parseSince(since, c.srv.Now())
				if err != nil {
					return err
				}
				f.Since = t
			}
			if c.srv.Audit == nil {
				return fmt.Errorf("audit log unavailable")
			}
			rows, err := c.srv.Audit.List(cmd.Context(), f)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				type row struct {
					ID     int64  `json:"id"`
					Time   string `json:"time"`
					Actor  string `json:"actor"`
					Front  string `json:"front"`
					Action string `json:"action"`
					Target string `json:"target"`
					Addr   string `json:"addr"`
					Result string `json:"result"`
					Detail string `json:"detail"`
				}
				out := make([]row, 0, len(rows))
				for _, e := range rows {
					out = append(out, row{e.ID, stamp(e.Time), e.Actor, e.Front, e.Action, e.Target, e.Addr, e.Result, e.Detail})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := table(cmd.OutOrStdout())
			fmt.Fprintln(tw, "TIME\tACTOR\tFRONT\tACTION\tTARGET\tADDR\tRESULT\tDETAIL")
			for _, e := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(e.Time), e.Actor, e.Front, e.Action,
					e.Target, e.Addr, e.Result, oneLine(e.Detail))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "only rows whose actor is this user")
	cmd.Flags().StringVar(&since, "since", "", "only rows since a time (RFC 3339) or a duration ago (24h)")
	cmd.Flags().IntVar(&limit, "limit", audit.DefaultLimit, "at most this many rows")
	cmd.Example = c.examples("audit --since 1h", "audit --user bob --since 2026-11-29 --json", "audit --limit 20")
	jsonFlag(cmd)
	return cmd
}

// parseSince reads "2026-11-29T10:00:00Z", "2026-11-29" or a duration ago.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--since %q: want RFC 3339 time, a date or a duration such as 24h: %w", s, keys.ErrInvalid)
}
