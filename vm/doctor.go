// Package vm manages the microVMs ("boxes") of one host.
package vm

import (
	"errors"

	"github.com/spf13/cobra"
)

// NewDoctorCommand returns `sbx doctor`. (Placeholder until the vm issue lands.)
func NewDoctorCommand() *cobra.Command {
	return &cobra.Command{Use: "doctor", Short: "Check QEMU, the guest kernel and the accelerator", RunE: func(*cobra.Command, []string) error {
		return errors.New("not implemented yet")
	}}
}
