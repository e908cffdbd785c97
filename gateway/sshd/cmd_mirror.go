package sshd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// mirrorCmd lists the internal package mirrors (every user) and adds or
// removes one (admins). Every rule is the core's (fleet.Mirrors,
// fleet.AddMirror, fleet.RemoveMirror).
func (c *call) mirrorCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "mirror",
		Short: "Internal package mirrors: an admin's exception letting boxes reach a named mirror host on a private range"})
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the internal package mirrors (a box reaches one when its allow-list names the mirror's host)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			list, err := f.Mirrors(cmd.Context(), c.actor)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no mirrors; an admin adds one with: mirror add NAME HOST[:PORT] --range CIDR")
				return nil
			}
			w := table(cmd.OutOrStdout())
			fmt.Fprintln(w, "MIRROR\tHOST\tRANGES\tSOURCE")
			for _, m := range list {
				src := m.Source
				if m.AddedBy != "" {
					src += " (" + m.AddedBy + ")"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", m.Name, m.Host, strings.Join(m.Ranges, " "), src)
			}
			return w.Flush()
		},
	}
	var ranges []string
	add := &cobra.Command{
		Use:   "add NAME HOST[:PORT] [--range CIDR]…",
		Short: "Declare an internal package mirror (admins only): its HOST may resolve into the ranges given (a host that is an address needs none)",
		Long: "Declare an internal package mirror (admins only, audited as net.mirror.add). A box whose allow-list names HOST[:PORT] may then " +
			"reach it although it resolves into a private or reserved range, but only inside the ranges given here; a loopback, link-local " +
			"or gateway address needs a range of exactly that address. A mirror opens nothing by itself.",
		Args:        cobra.ExactArgs(2),
		Annotations: map[string]string{"access": accessAdmin},
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			m, err := f.AddMirror(cmd.Context(), c.actor, args[0], args[1], ranges)
			if err != nil {
				return err
			}
			return done(cmd, "added", map[string]any{"mirror": m},
				fmt.Sprintf("added mirror %s: %s may resolve into %s; boxes reach it with --allow %s", m.Name, m.Host, strings.Join(m.Ranges, " "), m.Host))
		},
	}
	add.Flags().StringArrayVar(&ranges, "range", nil, "a CIDR prefix or address the host's addresses may fall in; repeat for more")
	rm := &cobra.Command{
		Use:         "rm NAME",
		Short:       "Remove an internal package mirror (admins only)",
		Args:        cobra.ExactArgs(1),
		Annotations: map[string]string{"access": accessAdmin},
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := c.fleet()
			if err != nil {
				return err
			}
			if err := f.RemoveMirror(cmd.Context(), c.actor, args[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"mirror": args[0]}, "removed mirror "+args[0])
		},
	}
	ls.Example = c.examples("mirror ls", "mirror ls --json")
	add.Example = c.examples("mirror add npm-corp npm.corp.example --range 10.20.0.0/16", "mirror add pypi-corp 10.30.1.5:8080")
	rm.Example = c.examples("mirror rm npm-corp")
	jsonFlag(ls)
	jsonFlag(add)
	jsonFlag(rm)
	cmd.AddCommand(ls, add, rm)
	return cmd
}
