package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// MirrorsOut lists the internal package mirrors.
type MirrorsOut struct {
	Mirrors []fleet.MirrorInfo `json:"mirrors"`
}

// MirrorSetIn adds a mirror, or with remove removes one.
type MirrorSetIn struct {
	Name   string   `json:"name" jsonschema:"the mirror's name (a-z, 0-9, - and _), e.g. npm-corp"`
	Host   string   `json:"host,omitempty" jsonschema:"HOST[:PORT] of the mirror, e.g. npm.corp.example:4873 (adding only)"`
	Ranges []string `json:"ranges,omitempty" jsonschema:"CIDR prefixes or addresses its addresses may fall in, e.g. [\"10.20.0.0/16\"]; a host that is an address needs none (adding only)"`
	Remove bool     `json:"remove,omitempty" jsonschema:"remove the mirror named instead of adding one"`
}

// MirrorSetOut is the mirror added, or the name removed.
type MirrorSetOut struct {
	Mirror  *fleet.MirrorInfo `json:"mirror,omitempty"`
	Removed string            `json:"removed,omitempty"`
}

func (h *handler) addMirrorTools() {
	add(h, tool{name: "mirrors", title: "Internal package mirrors",
		desc: "List the internal package mirrors admins declared: hosts (a company's npm, PyPI or Go mirror) that may resolve into a private " +
			"range, and the ranges allowed. A box reaches one only when its allow-list names the mirror's host (delegate's allow, the allow tool)."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, MirrorsOut, error) {
			list, err := h.fleet.Mirrors(ctx, c.actor)
			return nil, MirrorsOut{Mirrors: list}, err
		})

	add(h, tool{name: "mirror_set", title: "Add or remove an internal package mirror", write: true,
		desc: "Admins only: declare an internal package mirror (name, host, ranges) or remove one (remove: true). Audited. A mirror opens " +
			"nothing by itself; a loopback, link-local or gateway address needs a range of exactly that address."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in MirrorSetIn) (*sdk.CallToolResult, MirrorSetOut, error) {
			if in.Remove {
				if in.Host != "" || len(in.Ranges) > 0 {
					return nil, MirrorSetOut{}, invalid("remove takes only the name")
				}
				if err := h.fleet.RemoveMirror(ctx, c.actor, in.Name); err != nil {
					return nil, MirrorSetOut{}, err
				}
				return nil, MirrorSetOut{Removed: in.Name}, nil
			}
			m, err := h.fleet.AddMirror(ctx, c.actor, in.Name, in.Host, in.Ranges)
			if err != nil {
				return nil, MirrorSetOut{}, err
			}
			return nil, MirrorSetOut{Mirror: &m}, nil
		})
}
