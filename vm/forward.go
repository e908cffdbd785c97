package vm

import (
	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/fwd"
)

// NewForwardCommand is the hidden `sbx vm-fwd SOCKET` that QEMU runs for each
// connection a box opens to EgressAddr: it joins that connection (fds 0-2)
// to the gateway's unix socket for the box. Not for people; see vm/fwd.
func NewForwardCommand() *cobra.Command {
	return &cobra.Command{
		Use:    fwd.Command + " SOCKET",
		Short:  "Join one egress connection of a box to the gateway (run by QEMU)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fwd.Main(cmd.Context(), args[0])
		},
	}
}
