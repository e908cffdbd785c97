package buildinfo

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

// NewCommand returns `sbx version`: this binary's build, as text or JSON.
func NewCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version sbx was built with",
		Example: `  sbx version
  sbx version --json | jq -r .revision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := Get()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(info)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "sbx version %s\n", info)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
