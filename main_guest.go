//go:build guest

package main

import "github.com/spf13/cobra"

// gatewayCommands: the guest binary has none.
func gatewayCommands() []*cobra.Command { return nil }
