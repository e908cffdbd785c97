package sshd

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// extendCmd pushes a box's deadline out (the core caps it at
// box.max_lifetime and audits it).
func (c *call) extendCmd() *cobra.Command {
	cmd := c.boxCmd("extend BOX DURATION", "Push a box's deadline (its max duration) out by DURATION (30m, 2h), up to box.max_lifetime",
		cobra.ExactArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			by, err := fleet.ParseExtension(rest[0])
			if err != nil {
				return err
			}
			b, err := f.Extend(cmd.Context(), c.actor, box, by)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "box %s: deadline %s\n", b.Name, when(c.srv.Now(), b.Deadline))
			return nil
		})
	cmd.Example = c.examples("extend fix-the-flaky-3f2a1c 2h", "extend --json fix-the-flaky-3f2a1c 30m")
	return jsonFlag(cmd)
}

// size is a box's machine size for people: "1024 MiB, 2 vCPUs".
func size(b fleet.Box) string {
	cpus := strconv.Itoa(b.VCPUs) + " vCPU"
	if b.VCPUs != 1 {
		cpus += "s"
	}
	return fmt.Sprintf("%d MiB, %s", b.MemoryMiB, cpus)
}
