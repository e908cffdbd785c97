//go:build !guest

package main

import (
	"github.com/spf13/cobra"

	"sbx.dev/sbx/gateway"
	"sbx.dev/sbx/vm"
)

// gatewayCommands are the host's: the gateway and its tools.
func gatewayCommands() []*cobra.Command {
	return []*cobra.Command{gateway.NewServeCommand(gateway.Options{}), gateway.NewConfigCommand(), vm.NewDoctorCommand()}
}
