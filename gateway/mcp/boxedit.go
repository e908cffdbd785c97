package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// TitleIn sets a box's title.
type TitleIn struct {
	Box   string `json:"box" jsonschema:"the box name"`
	Title string `json:"title" jsonschema:"the new title: 1 to 80 printable characters on one line"`
}

func (t TitleIn) boxName() string { return t.Box }

// RepoAddIn adds a repository to a box.
type RepoAddIn struct {
	Box  string `json:"box" jsonschema:"the box name"`
	Repo string `json:"repo" jsonschema:"owner/name, or an https URL of the configured git host"`
	Ref  string `json:"ref,omitempty" jsonschema:"branch, tag or commit to start from (default: the default branch)"`
}

func (r RepoAddIn) boxName() string { return r.Box }

// ExtendIn pushes a box's deadline out.
type ExtendIn struct {
	Box string `json:"box" jsonschema:"the box name"`
	By  string `json:"by" jsonschema:"how much longer the box may live: a duration such as 30m, 2h or 1h30m"`
}

func (e ExtendIn) boxName() string { return e.Box }

// addBoxEditTools registers the tools that change what a box holds or
// shows: its title, its repositories.
func (h *handler) addBoxEditTools() {
	add(h, tool{name: "title", title: "Set a box's title", write: true, idempotent: true,
		desc: "Set a box's title (1 to 80 printable characters, one line), the short line lists show and search. The box's name does not change: keep using it."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in TitleIn) (*sdk.CallToolResult, BoxOut, error) {
			b, err := h.fleet.SetTitle(ctx, c.actor, in.Box, in.Title)
			if err != nil {
				return nil, BoxOut{}, err
			}
			return nil, boxOut(b), nil
		})

	add(h, tool{name: "extend", title: "Extend a box's deadline", write: true,
		desc: "Push a box's deadline (when its max duration ends and its machine is stopped) out by a duration, up to the most a box may live (box.max_lifetime from its start; beyond it the call is refused and says how far the box can still go). status shows the deadline."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ExtendIn) (*sdk.CallToolResult, BoxOut, error) {
			by, err := fleet.ParseExtension(in.By)
			if err != nil {
				return nil, BoxOut{}, err
			}
			b, err := h.fleet.Extend(ctx, c.actor, in.Box, by)
			if err != nil {
				return nil, BoxOut{}, err
			}
			return nil, boxOut(b), nil
		})

	add(h, tool{name: "repo_add", title: "Add a repository to a box", write: true,
		desc: "Add a repository to a box the way delegate does: the gateway clones it with your account (the token never enters the box), " +
			"copies it to /workspace/NAME on the box's branch sbx/BOX, and lets the box push that branch only. " +
			"A repository the box has already is refused. Tell the agent with answer if it should use it."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in RepoAddIn) (*sdk.CallToolResult, BoxOut, error) {
			b, err := h.fleet.AddRepo(ctx, c.actor, in.Box, fleet.RepoSpec{Repo: in.Repo, Ref: in.Ref})
			if err != nil {
				return nil, BoxOut{}, err
			}
			return nil, boxOut(b), nil
		})
}
