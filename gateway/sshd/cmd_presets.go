package sshd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// presetsCmd lists the egress presets (named allow-lists maintained in
// sbx) and, with its default subcommand, shows or sets the caller's
// default set. Every rule is the core's (fleet.Presets,
// fleet.SetDefaultPresets).
func (c *call) presetsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "presets",
		Short: "List the egress presets (@npm, @pypi, …: named allow-lists maintained in sbx) with their hosts, your default set and the site's",
		Long: "List the egress presets: named allow-lists maintained in sbx, usable wherever a domain is (new --allow @npm, allow BOX @pypi, " +
			"the web forms, MCP). A box's list keeps the name, so it follows the preset as sbx updates it; the box network expands it, and private " +
			"or reserved addresses stay refused behind every name. Your default presets join every box you delegate; the site's (net.default_presets) " +
			"are part of every box's grant.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			v, err := f.Presets(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			w := table(cmd.OutOrStdout())
			fmt.Fprintln(w, "PRESET\tHOSTS\tWHAT")
			for _, p := range v.Presets {
				fmt.Fprintf(w, "@%s\t%s\t%s\n", p.Name, strings.Join(p.Entries, " "), p.Title)
			}
			w.Flush()
			fmt.Fprintf(cmd.OutOrStdout(), "\nyour default: %s\nsite default: %s\n", presetList(v.Default, "none (presets default @npm … sets it)"), presetList(v.Site, "none"))
			return nil
		},
	}
	cmd.Example = c.examples("presets", "presets --json")
	jsonFlag(cmd)
	var clear bool
	def := &cobra.Command{
		Use:   "default [--clear] [@PRESET…]",
		Short: "Show your default egress presets, or set them (they join every box you delegate from now on; --clear: none)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if clear && len(args) > 0 {
				return fmt.Errorf("--clear takes no presets: %w", fleet.ErrInvalid)
			}
			if len(args) == 0 && !clear {
				v, err := f.Presets(cmd.Context(), c.actor)
				if err != nil {
					return err
				}
				if wantJSON(cmd) {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"default": v.Default})
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "your default presets: %s\n", presetList(v.Default, "none"))
				return err
			}
			list, err := f.SetDefaultPresets(cmd.Context(), c.actor, args)
			if err != nil {
				return err
			}
			return done(cmd, "set", map[string]any{"default": list},
				"your default presets: "+presetList(list, "none")+" (they join every box you delegate from now on)")
		},
	}
	def.Flags().BoolVar(&clear, "clear", false, "no default presets")
	def.Example = c.examples("presets default", "presets default @npm @github", "presets default --clear")
	jsonFlag(def)
	cmd.AddCommand(def)
	return cmd
}

// presetList is a list of presets for people, or none.
func presetList(list []string, none string) string {
	if len(list) == 0 {
		return none
	}
	return strings.Join(list, " ")
}
