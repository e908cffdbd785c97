package sshd

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/termtext"
)

// notifyCmd is the notification channels' command family: every rule is
// the core's (AddChannel and the rest); this parses and prints.
func (c *call) notifyCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "notify", Short: "Manage where you hear that a box waits, is done or failed (webhook, ntfy, Slack)"})

	var kind, url, events string
	var digest, secretStdin bool
	add := &cobra.Command{
		Use:   "add NAME --kind webhook|ntfy|slack --url URL [--events waiting,done,...] [--digest] [--secret-stdin]",
		Short: "Add a notification channel; a webhook's signing secret is made and shown once (or read with --secret-stdin, as is an ntfy token)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			req := fleet.ChannelRequest{Name: args[0], Kind: kind, URL: url, Digest: digest}
			if events != "" {
				req.Events = strings.Split(events, ",")
			}
			if secretStdin {
				if _, _, isPty := c.sess.Pty(); isPty {
					return fmt.Errorf("notify add --secret-stdin: pipe the secret on stdin without -t: %w", fleet.ErrInvalid)
				}
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxStdinToken+1))
				if err != nil {
					return fmt.Errorf("read the secret from stdin: %w", err)
				}
				if len(data) > maxStdinToken {
					return fmt.Errorf("secret on stdin: more than %d bytes: %w", maxStdinToken, fleet.ErrInvalid)
				}
				if req.Secret = strings.TrimSpace(string(data)); req.Secret == "" {
					return fmt.Errorf("--secret-stdin: no secret on stdin: %w", fleet.ErrInvalid)
				}
			}
			ch, err := f.AddChannel(cmd.Context(), c.actor, req)
			if err != nil {
				return err
			}
			text := fmt.Sprintf("added %s channel %s (%s; events: %s; digest: %t)", ch.Kind, ch.Name, ch.URL, strings.Join(ch.Events, ","), ch.Digest)
			if ch.Secret != "" {
				text += "\nsigning secret (shown once; verify webhook-signature with it): " + ch.Secret
			}
			return done(cmd, "added", map[string]any{"channel": ch}, text)
		},
	}
	add.Flags().StringVar(&kind, "kind", "", "webhook, ntfy or slack")
	add.Flags().StringVar(&url, "url", "", "where to send (an ntfy topic URL, a Slack incoming-webhook URL, your webhook endpoint)")
	add.Flags().StringVar(&events, "events", "", "comma-separated: "+strings.Join(fleet.NotifyEvents, ",")+" (default: all)")
	add.Flags().BoolVar(&digest, "digest", false, "also send the daily digest here")
	add.Flags().BoolVar(&secretStdin, "secret-stdin", false, "read the webhook secret (whsec_…) or ntfy token from stdin")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your notification channels (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			list, err := f.Channels(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no notification channels; add one with: notify add NAME --kind ntfy --url https://ntfy.sh/TOPIC")
				return nil
			}
			for _, ch := range list {
				state := "on"
				if !ch.Enabled {
					state = "off"
				}
				digest := ""
				if ch.Digest {
					digest = " +digest"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-16s %-7s %-3s %s  events: %s%s\n", ch.Name, ch.Kind, state, ch.URL, strings.Join(ch.Events, ","), digest)
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove one of your notification channels and its delivery log",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.RemoveChannel(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"channel": args[0]}, "removed notification channel "+args[0])
		},
	}
	enable := func(on bool) *cobra.Command {
		use, verb := "disable", "disabled"
		if on {
			use, verb = "enable", "enabled"
		}
		return &cobra.Command{
			Use:   use + " NAME",
			Short: strings.ToUpper(use[:1]) + use[1:] + " one of your notification channels",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				f, err := c.fleet()
				if err != nil {
					return err
				}
				ch, err := f.SetChannelEnabled(cmd.Context(), c.actor, args[0], on)
				if err != nil {
					return err
				}
				return done(cmd, verb, map[string]any{"channel": ch}, verb+" notification channel "+ch.Name)
			},
		}
	}
	test := &cobra.Command{
		Use:   "test NAME",
		Short: "Send a test notification now and show what the receiver answered",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			// Not delivered is an error (ErrUnavailable) naming the
			// receiver's answer; the delivery log keeps it too.
			d, err := f.TestChannel(cmd.Context(), c.actor, args[0])
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), d)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "delivered: the receiver answered HTTP %d\n", d.LastStatus)
			return nil
		},
	}
	var limit int
	log := &cobra.Command{
		Use:   "log NAME",
		Short: "Show a channel's deliveries, newest first (status, attempts, the receiver's last answer)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			list, err := f.Deliveries(cmd.Context(), c.actor, args[0], limit)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no deliveries yet; try: notify test "+args[0])
				return nil
			}
			for _, d := range list {
				line := fmt.Sprintf("%s %-9s %-9s %-14s attempts=%d", d.Created.UTC().Format(time.DateTime), d.Event, d.Status, d.Box, d.Attempts)
				if d.LastStatus != 0 {
					line += fmt.Sprintf(" http=%d", d.LastStatus)
				}
				if !d.NextAttempt.IsZero() {
					line += " next=" + d.NextAttempt.UTC().Format(time.DateTime)
				}
				if e := d.LastError.String(); e != "" {
					line += " " + e
				}
				fmt.Fprintln(cmd.OutOrStdout(), termtext.String(line))
			}
			return nil
		},
	}
	log.Flags().IntVar(&limit, "limit", 20, "how many (at most 100)")
	add.Example = c.examples("notify add phone --kind ntfy --url https://ntfy.sh/my-secret-topic --events waiting,failed",
		"notify add hook --kind webhook --url https://example.com/sbx --digest",
		`echo "$NTFY_TOKEN" | {ssh} notify add phone --kind ntfy --url https://ntfy.example.com/sbx --secret-stdin`)
	ls.Example = c.examples("notify ls", "notify ls --json")
	rm.Example = c.examples("notify rm phone")
	test.Example = c.examples("notify test phone")
	log.Example = c.examples("notify log phone", "notify log phone --json")
	on, off := enable(true), enable(false)
	on.Example = c.examples("notify enable phone")
	off.Example = c.examples("notify disable phone")
	for _, sub := range []*cobra.Command{add, ls, rm, on, off, test, log} {
		jsonFlag(sub)
	}
	cmd.AddCommand(add, ls, rm, on, off, test, log)
	return cmd
}
