package gateway

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewServeCommand returns `sbx serve`. (Placeholder until the foundation lands.)
func NewServeCommand() *cobra.Command {
	return &cobra.Command{Use: "serve", Short: "Run the gateway", RunE: func(*cobra.Command, []string) error {
		return errors.New("not implemented yet")
	}}
}

// NewConfigCommand returns `sbx config`. (Placeholder until the foundation lands.)
func NewConfigCommand() *cobra.Command {
	return &cobra.Command{Use: "config", Short: "Print the effective configuration", RunE: func(*cobra.Command, []string) error {
		return errors.New("not implemented yet")
	}}
}
