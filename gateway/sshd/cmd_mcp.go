package sshd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/headertext"
)

func (c *call) mcpCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "mcp", Short: "Manage the MCP servers your boxes reach through the gateway (their secrets never enter a box)"})
	add := &cobra.Command{
		Use:   "add NAME URL < headers",
		Short: "Add an MCP server (Streamable HTTP); its secret headers are read from stdin as \"Name: value\" lines, never from the command line",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			headers := map[string]string{}
			if _, _, isPty := c.sess.Pty(); !isPty {
				data, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), headertext.MaxBytes+1))
				if err != nil {
					return fmt.Errorf("read headers from stdin: %w", err)
				}
				if headers, err = headertext.Parse(string(data)); err != nil {
					return err
				}
			}
			s, err := f.AddMCPServer(cmd.Context(), c.actor, args[0], args[1], headers)
			if err != nil {
				return err
			}
			endpoint := "http://" + fleet.GatewayHost + "/mcp/" + s.Name
			return done(cmd, "added", map[string]any{"mcp_server": s, "endpoint": endpoint},
				fmt.Sprintf("added MCP server %s (%s; headers: %s); boxes reach it at %s",
					s.Name, s.URL, strings.Join(s.Headers, ", "), endpoint))
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List your MCP servers (header names only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			list, err := f.MCPServers(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no MCP servers; add one with: mcp add NAME URL < headers")
				return nil
			}
			for _, s := range list {
				fmt.Fprintf(cmd.OutOrStdout(), "%-16s %s  headers: %s\n", s.Name, s.URL, strings.Join(s.Headers, ", "))
			}
			return nil
		},
	}
	jsonFlag(ls)
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove one of your MCP servers",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.RemoveMCPServer(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"mcp_server": args[0]}, "removed MCP server "+args[0])
		},
	}
	add.Example = c.examples(`echo "Authorization: Bearer $LINEAR_KEY" | {ssh} mcp add linear https://mcp.linear.app/mcp`,
		"mcp add docs https://example.com/mcp < /dev/null")
	ls.Example = c.examples("mcp ls", "mcp ls --json")
	rm.Example = c.examples("mcp rm linear")
	jsonFlag(add)
	jsonFlag(rm)
	cmd.AddCommand(add, ls, rm)
	return cmd
}
