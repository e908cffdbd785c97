package sshd

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/internal/buildinfo"
	"sbx.dev/sbx/internal/cliusage"
	"sbx.dev/sbx/keys"
)

// maxStdinKeys caps authorized_keys text read from stdin.
const maxStdinKeys = 1 << 20

// root builds the command tree for one session. Building it per session
// keeps flags and state from leaking between users.
func (c *call) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "sbx",
		Short:         "sbx gateway: run coding agents in throwaway microVMs",
		SilenceUsage:  true,
		SilenceErrors: true,
		// The usage line shows how to reach this very server.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: c.usagePrefix()},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if needsAdmin(cmd) && c.user.Role != keys.RoleAdmin {
				return fmt.Errorf("%s: admins only: %w", cmd.CommandPath(), keys.ErrForbidden)
			}
			return nil
		},
	}
	root.Example = c.examples(`new --agent script "hello world"`, "logs -f BOX", "-t attach BOX", "ls --json", "help new")
	group(root) // an unknown command is a wrong command line, like a group's
	root.CompletionOptions.DisableDefaultCmd = true
	root.DisableSuggestions = true
	whoami := c.whoamiCmd()
	whoami.Example = c.examples("whoami", "whoami --json")
	root.AddCommand(whoami, c.loginCmd(), c.userCmd(), c.keyCmd(), c.tokenCmd(), c.auditCmd())
	root.AddCommand(c.boxCmds()...)
	root.AddCommand(c.accountCmd(), c.mcpCmd(), c.poolCmd(), c.attachCmd(), c.execCmd())
	root.AddCommand(c.notifyCmd())
	root.AddCommand(c.prCmd(), c.reposCmd())
	root.AddCommand(c.presetsCmd())
	root.AddCommand(c.mirrorCmd())
	root.AddCommand(c.profileCmd())
	root.AddGroup(&cobra.Group{ID: groupBoxes, Title: "Boxes:"}, &cobra.Group{ID: groupAdmin, Title: "Accounts and administration:"})
	for _, sub := range root.Commands() {
		if sub.GroupID == "" {
			sub.GroupID = groupAdmin
		}
	}
	root.SetHelpCommandGroupID(groupAdmin)
	if c.srv.ExtraCommands != nil {
		root.AddCommand(c.srv.ExtraCommands(c.sess)...)
	}
	cliusage.Mark(root)
	return root
}

// usageLine is cmd's synopsis: its use line, or "PATH [command]" for a
// group (the root is one too).
func usageLine(cmd *cobra.Command) string {
	if cmd.Annotations[annotationGroup] != "" {
		help := cmd.Root().CommandPath() + " help"
		if cmd.HasParent() {
			help += " " + strings.TrimPrefix(cmd.CommandPath(), cmd.Root().CommandPath()+" ")
		}
		return cmd.CommandPath() + " [command]; the list: " + help
	}
	return cmd.UseLine()
}

func (c *call) whoamiCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Show who you are signed in as",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fp := ""
			if pk := c.sess.PublicKey(); pk != nil {
				fp = fingerprint(pk)
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), map[string]string{
					"user": c.user.Name, "role": string(c.user.Role), "key": fp, "version": buildinfo.Get().Short()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (%s)\nkey %s\nserver sbx %s\n", c.user.Name, c.user.Role, fp, buildinfo.Get())
			return nil
		},
	}
	jsonFlag(cmd)
	return cmd
}

// group makes cmd a command group: alone it prints its help; with an
// unknown subcommand it fails like the root does.
func group(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationGroup] = "true"
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return &cliusage.Error{Cmd: cmd, Err: fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
		}
		return cmd.Help()
	}
	return cmd
}

// readKeys returns authorized_keys text from args, or from stdin when there
// are none. Args may split a key line into words ("ssh-ed25519", "AAAA…",
// "comment"); a new line starts at every key type.
func (c *call) readKeys(cmd *cobra.Command, args []string) (string, error) {
	if len(args) > 0 {
		return joinKeyArgs(args), nil
	}
	data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxStdinKeys+1))
	if err != nil {
		return "", fmt.Errorf("read keys from stdin: %w", err)
	}
	if len(data) > maxStdinKeys {
		return "", fmt.Errorf("keys on stdin: more than %d bytes: %w", maxStdinKeys, keys.ErrInvalid)
	}
	if strings.TrimSpace(string(data)) == "" {
		return "", fmt.Errorf("no keys given: pass them as arguments or authorized_keys text on stdin: %w", keys.ErrInvalid)
	}
	return string(data), nil
}

func joinKeyArgs(args []string) string {
	var lines []string
	for _, a := range args {
		for w := range strings.FieldsSeq(a) {
			if isKeyType(w) || len(lines) == 0 {
				lines = append(lines, w)
				continue
			}
			lines[len(lines)-1] += " " + w
		}
	}
	return strings.Join(lines, "\n")
}

func isKeyType(w string) bool {
	return strings.HasPrefix(w, "ssh-") || strings.HasPrefix(w, "ecdsa-sha2-") || strings.HasPrefix(w, "sk-")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeJSONLine writes v as one line: a record of a stream (logs -f) or an
// error on stderr.
func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// jsonFlag gives cmd the --json flag every printing command has.
func jsonFlag(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().Bool("json", false, "print JSON")
	return cmd
}

// wantJSON reports whether cmd runs with --json.
func wantJSON(cmd *cobra.Command) bool {
	on, _ := cmd.Flags().GetBool("json")
	return on
}

// done reports what a command that acts did: the text line for people, or
// with --json one object {"ok": true, "action": action, …fields}.
func done(cmd *cobra.Command, action string, fields map[string]any, text string) error {
	if wantJSON(cmd) {
		out := map[string]any{"ok": true, "action": action}
		maps.Copy(out, fields)
		return writeJSON(cmd.OutOrStdout(), out)
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), text)
	return err
}

// examples formats a command's Example: each line is a command line after
// "ssh -p PORT HOST" (this server's); one starting "-t " asks ssh for a
// terminal; one holding {ssh} places the prefix itself
// (echo "$TOKEN" | {ssh} account add work).
func (c *call) examples(lines ...string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		switch {
		case strings.Contains(l, "{ssh}"):
			out[i] = "  " + strings.ReplaceAll(l, "{ssh}", c.usagePrefix())
		case strings.HasPrefix(l, "-t "):
			out[i] = "  ssh -t" + strings.TrimPrefix(c.usagePrefix(), "ssh") + " " + strings.TrimPrefix(l, "-t ")
		default:
			out[i] = "  " + c.usagePrefix() + " " + l
		}
	}
	return strings.Join(out, "\n")
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine keeps an error on one line of stderr.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
