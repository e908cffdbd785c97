package mcp

import (
	"context"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// CheckpointIn saves a box's disks.
type CheckpointIn struct {
	Box   string `json:"box" jsonschema:"the box name"`
	Label string `json:"label,omitempty" jsonschema:"a short note to tell the checkpoint by (one line)"`
}

func (c CheckpointIn) boxName() string { return c.Box }

// CheckpointOut is one checkpoint of a box.
type CheckpointOut struct {
	Box     string `json:"box"`
	ID      string `json:"id" jsonschema:"the checkpoint's id, for rewind"`
	Label   string `json:"label,omitempty"`
	Created string `json:"created" jsonschema:"RFC 3339"`
	Bytes   int64  `json:"bytes" jsonschema:"host disk space the checkpoint takes"`
}

func (c CheckpointOut) boxName() string { return c.Box }

// CheckpointsOut lists a box's checkpoints.
type CheckpointsOut struct {
	Box         string          `json:"box"`
	Checkpoints []CheckpointOut `json:"checkpoints" jsonschema:"oldest first"`
}

func (c CheckpointsOut) boxName() string { return c.Box }

// RewindIn names a box's checkpoint (to rewind to, or to remove).
type RewindIn struct {
	Box        string `json:"box" jsonschema:"the box name"`
	Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint's id (cp-…), as checkpoint returned it or checkpoints lists it"`
}

func (r RewindIn) boxName() string { return r.Box }

// CheckpointRemoveOut says a checkpoint is gone.
type CheckpointRemoveOut struct {
	Box        string `json:"box"`
	Checkpoint string `json:"checkpoint"`
	Removed    bool   `json:"removed"`
}

func (c CheckpointRemoveOut) boxName() string { return c.Box }

// ForkIn makes a new box from a box.
type ForkIn struct {
	Box  string `json:"box" jsonschema:"the box to fork"`
	Task string `json:"task,omitempty" jsonschema:"optional: a follow-up the new box starts with at once"`
}

func (f ForkIn) boxName() string { return f.Box }

func checkpointOut(box string, c fleet.Checkpoint) CheckpointOut {
	return CheckpointOut{Box: box, ID: c.ID, Label: c.Label, Created: c.Created.UTC().Format(time.RFC3339), Bytes: c.Bytes}
}

// addSnapshotTools registers checkpoint, checkpoints, rewind and fork:
// each one core call, every rule the core's.
func (h *handler) addSnapshotTools() {
	add(h, tool{name: "checkpoint", title: "Checkpoint a box", write: true,
		desc: "Save a running or sleeping box's disks (workspace and root filesystem) as a checkpoint to rewind to later; a running box is paused for the copy and goes on. " +
			"A box keeps at most 8. Processes are not saved: rewind boots on the saved disks."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in CheckpointIn) (*sdk.CallToolResult, CheckpointOut, error) {
			cp, err := h.fleet.Checkpoint(ctx, c.actor, in.Box, in.Label)
			if err != nil {
				return nil, CheckpointOut{}, err
			}
			return nil, checkpointOut(in.Box, cp), nil
		})

	add(h, tool{name: "checkpoints", title: "List a box's checkpoints",
		desc: "List a box's checkpoints, oldest first: id, label, when, size."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in BoxRef) (*sdk.CallToolResult, CheckpointsOut, error) {
			list, err := h.fleet.Checkpoints(ctx, c.actor, in.Box)
			if err != nil {
				return nil, CheckpointsOut{}, err
			}
			out := CheckpointsOut{Box: in.Box, Checkpoints: []CheckpointOut{}}
			for _, cp := range list {
				out.Checkpoints = append(out.Checkpoints, checkpointOut(in.Box, cp))
			}
			return nil, out, nil
		})

	add(h, tool{name: "checkpoint_remove", title: "Remove a checkpoint", write: true, destructive: true,
		desc: "Remove one of a box's checkpoints and its files (a box keeps at most 8)."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in RewindIn) (*sdk.CallToolResult, CheckpointRemoveOut, error) {
			if err := h.fleet.DeleteCheckpoint(ctx, c.actor, in.Box, in.Checkpoint); err != nil {
				return nil, CheckpointRemoveOut{}, err
			}
			return nil, CheckpointRemoveOut{Box: in.Box, Checkpoint: in.Checkpoint, Removed: true}, nil
		})

	add(h, tool{name: "rewind", title: "Rewind a box to a checkpoint", write: true, destructive: true,
		desc: "Stop a box, put its disks back as they were at a checkpoint and boot it again. The box keeps its name, branch, allow-list and deadline; " +
			"a running turn is lost and everything written since the checkpoint is gone. The agent's conversation goes back to the checkpoint's."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in RewindIn) (*sdk.CallToolResult, BoxOut, error) {
			b, err := h.fleet.Rewind(ctx, c.actor, in.Box, in.Checkpoint)
			if err != nil {
				return nil, BoxOut{}, err
			}
			return nil, boxOut(b), nil
		})

	add(h, tool{name: "fork", title: "Fork a box", write: true,
		desc: "Make a new box of yours from a box's disks as they are now (work tree, uncommitted changes, the agent's conversation): same repos, allow-list, size and agent, " +
			"each repo on a new branch sbx/NEWBOX. With task, the new box starts a turn with it as a follow-up. Counts toward your box and size caps. Returns the new box."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ForkIn) (*sdk.CallToolResult, BoxOut, error) {
			b, err := h.fleet.Fork(ctx, c.actor, in.Box, in.Task)
			if err != nil {
				return nil, BoxOut{}, err
			}
			return nil, boxOut(b), nil
		})
}
