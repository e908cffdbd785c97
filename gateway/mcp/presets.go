package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// PresetsDefaultIn sets the caller's default egress presets.
type PresetsDefaultIn struct {
	Presets []string `json:"presets" jsonschema:"the presets every box you delegate from now on may reach, e.g. [\"@npm\", \"@github\"]; an empty list clears them"`
}

// PresetsDefaultOut is the default set as stored.
type PresetsDefaultOut struct {
	Default []string `json:"default"`
}

func (h *handler) addPresetTools() {
	add(h, tool{name: "presets", title: "Egress presets",
		desc: "List the egress presets: named allow-lists maintained in sbx (@npm, @pypi, @go, @crates, @rubygems, @maven, @apt, @github) with their hosts, " +
			"your default set (joins every box you delegate) and the site's (part of every box's network). Name a preset wherever a domain goes " +
			"(delegate's allow, the allow tool). Private addresses stay refused behind every name."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, fleet.PresetsView, error) {
			v, err := h.fleet.Presets(ctx, c.actor)
			return nil, v, err
		})

	add(h, tool{name: "presets_default", title: "Set your default egress presets", write: true, idempotent: true,
		desc: "Set your default egress presets: they join the allow-list of every box you delegate from now on (boxes that exist keep theirs). " +
			"An empty list clears them. Choose only what your tasks need."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in PresetsDefaultIn) (*sdk.CallToolResult, PresetsDefaultOut, error) {
			list, err := h.fleet.SetDefaultPresets(ctx, c.actor, in.Presets)
			if err != nil {
				return nil, PresetsDefaultOut{}, err
			}
			return nil, PresetsDefaultOut{Default: list}, nil
		})
}
