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
