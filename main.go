// Command sbx is the gateway that runs coding agents in throwaway microVMs and
// fronts them over SSH, a web UI and MCP. Built with the tag "guest" it is
// the guest binary instead: PID 1 inside every box (see vm/guest/pid1), the hooks,
// the guest side of a run, the egress forwarder and the Kubernetes pod agent,
// without the gateway (a third of the size, and every box boot and every
// hook call pays for what the binary holds).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/hooks"
	"sbx.dev/sbx/internal/buildinfo"
	"sbx.dev/sbx/internal/cliusage"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/vm/fwd"
	"sbx.dev/sbx/vm/guest/boxcmd"
	"sbx.dev/sbx/vm/guest/pid1"
	"sbx.dev/sbx/vm/guest/podagent"
)

func main() {
	// Inside a box the kernel starts this binary as /init: it serves the
	// host's agent protocol and never returns to the CLI below.
	if pid1.IsInit() {
		os.Exit(pid1.Main())
	}
	execute(newRoot())
}

// execute runs the command line against root; an error ends the process
// with status 1, 2 and the usage line for a wrong command line (as over
// SSH), or the status the error carries (an interrupted start: 130).
func execute(root *cobra.Command) {
	cliusage.Mark(root)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "sbx:", err)
		status := 1
		var carried interface{ ExitStatus() int }
		var usage *cliusage.Error
		switch {
		case errors.As(err, &usage):
			fmt.Fprintln(os.Stderr, "usage:", usage.Cmd.UseLine())
			status = errkind.ExitCode(err)
		case errors.As(err, &carried):
			status = carried.ExitStatus()
		}
		os.Exit(status)
	}
}

// newRoot wires every subcommand. Each package owns its own commands; this
// file only lists them.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "sbx",
		Short:         "Run coding agents in throwaway microVMs, driven over SSH, web and MCP",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runnable, so an unknown command is checked by Args: a wrong
		// command line (exit 2), not a help page and 0.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		// cobra's own --version line ("sbx version …"), which `sbx version`
		// prints too. No SetVersionTemplate: a template makes text/template's
		// reflection reachable, and the linker then keeps every exported
		// method of every package (+20 MB, too big for a box's initramfs).
		Version: buildinfo.Get().String(),
	}
	root.AddCommand(gatewayCommands()...)
	root.AddCommand(
		buildinfo.NewCommand(),
		hooks.NewCommand(),
		boxcmd.NewCommand(),
		fwd.NewCommand(),
		podagent.NewCommand(),
	)
	return root
}
