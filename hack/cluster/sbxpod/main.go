// Command sbxpod stands in for the sbx binary in the test cluster's box image
// until main.go wires podagent.NewCommand: it has only `sbx pod-agent`.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/guest/podagent"
)

func main() {
	root := &cobra.Command{Use: "sbx", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(podagent.NewCommand())
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "sbx:", err)
		os.Exit(1)
	}
}
