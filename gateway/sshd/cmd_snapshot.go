package sshd

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/fleet"
)

// Checkpoints, rewinds and forks of a box: each command one core call
// (fleet.Checkpoint, Checkpoints, Rewind, Fork), every rule the core's.

func (c *call) checkpointCmd() *cobra.Command {
	cmd := c.boxCmd("checkpoint BOX [LABEL…]", "Save a box's disks as a checkpoint to rewind to or fork from (a running box pauses for the copy)",
		cobra.MinimumNArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			cp, err := f.Checkpoint(cmd.Context(), c.actor, box, strings.Join(rest, " "))
			if err != nil {
				return err
			}
			return done(cmd, "checkpointed", map[string]any{"box": box, "checkpoint": cp},
				fmt.Sprintf("box %s: checkpoint %s (%d MiB); rewind to it with: rewind %s %s", box, cp.ID, cp.Bytes>>20, box, cp.ID))
		})
	cmd.Long = "Save the box's disks (its workspace and root filesystem) as a checkpoint, kept beside the box until it is removed. " +
		"A running box is paused for the copy and goes on; a sleeping box stays asleep. A box keeps at most 8 checkpoints. " +
		"Processes are not kept: rewind and fork boot on the saved disks."
	cmd.Example = c.examples(`checkpoint fix-the-flaky-3f2a1c "before the refactor"`, "checkpoint --json fix-the-flaky-3f2a1c")
	return jsonFlag(cmd)
}

func (c *call) checkpointsCmd() *cobra.Command {
	cmd := c.boxCmd("checkpoints BOX", "List a box's checkpoints, oldest first", cobra.ExactArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, _ []string) error {
			list, err := f.Checkpoints(cmd.Context(), c.actor, box)
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "box %s has no checkpoints (make one with: checkpoint %s)\n", box, box)
				return nil
			}
			w := table(cmd.OutOrStdout())
			fmt.Fprintln(w, "CHECKPOINT\tCREATED\tSIZE\tLABEL")
			for _, cp := range list {
				fmt.Fprintf(w, "%s\t%s\t%d MiB\t%s\n", cp.ID, when(c.srv.Now(), cp.Created), cp.Bytes>>20, cp.Label)
			}
			return w.Flush()
		})
	cmd.Example = c.examples("checkpoints fix-the-flaky-3f2a1c", "checkpoints --json fix-the-flaky-3f2a1c")
	jsonFlag(cmd)
	rm := c.boxCmd("rm BOX CHECKPOINT", "Remove one of a box's checkpoints (a box keeps 8)", cobra.ExactArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			if err := f.DeleteCheckpoint(cmd.Context(), c.actor, box, rest[0]); err != nil {
				return err
			}
			return done(cmd, "removed", map[string]any{"box": box, "checkpoint": rest[0]},
				fmt.Sprintf("removed checkpoint %s of %s", rest[0], box))
		})
	rm.GroupID = ""
	rm.Example = c.examples("checkpoints rm fix-the-flaky-3f2a1c cp-ab12cd34")
	jsonFlag(rm)
	cmd.AddCommand(rm)
	return cmd
}

func (c *call) rewindCmd() *cobra.Command {
	cmd := c.boxCmd("rewind BOX CHECKPOINT", "Put a box's disks back as they were at a checkpoint and boot it again", cobra.ExactArgs(2),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			b, err := f.Rewind(cmd.Context(), c.actor, box, rest[0])
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "box %s: rewound to %s and booted again; it is %s\n", b.Name, rest[0], b.State)
			return nil
		})
	cmd.Long = "Stop the box's machine, put its disks back as they were at CHECKPOINT (see checkpoints BOX) and boot it again. " +
		"The box keeps its name, branch, allow-list and deadline; a running turn is lost, and the agent's conversation goes back to the checkpoint's."
	cmd.Example = c.examples("rewind fix-the-flaky-3f2a1c cp-ab12cd34")
	return jsonFlag(cmd)
}

func (c *call) forkCmd() *cobra.Command {
	cmd := c.boxCmd("fork BOX [TASK…]", "Make a new box from a box's disks as they are now, on its own branch; with TASK, start a turn in it",
		cobra.MinimumNArgs(1),
		func(cmd *cobra.Command, f *fleet.Fleet, box string, rest []string) error {
			b, err := f.Fork(cmd.Context(), c.actor, box, strings.Join(rest, " "))
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return writeJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "box %s: forked from %s; it is %s\n", b.Name, box, b.State)
			for _, r := range b.Repos {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s on branch %s\n", r.Name, r.Branch)
			}
			return nil
		})
	cmd.Long = "Make a new box of yours from BOX's disks as they are now (work tree, uncommitted changes, the agent's conversation): " +
		"the same repos, allow-list, size and agent, each repo on a new branch sbx/NEWBOX. With TASK, the new box starts a turn with it, " +
		"as a follow-up; without, it waits for one. The fork counts toward your box and size caps."
	cmd.Example = c.examples("fork fix-the-flaky-3f2a1c", `fork fix-the-flaky-3f2a1c "try it with a mutex instead"`, "fork --json fix-the-flaky-3f2a1c")
	return jsonFlag(cmd)
}
