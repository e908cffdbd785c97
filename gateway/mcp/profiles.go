package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// ProfileSetIn creates or replaces a project profile.
type ProfileSetIn struct {
	Name        string   `json:"name" jsonschema:"the profile's name: lowercase letters, digits, . _ -"`
	Site        bool     `json:"site,omitempty" jsonschema:"a site profile shared with every user (admins only); omitted: your own"`
	Image       string   `json:"image,omitempty" jsonschema:"the box image; omitted: the gateway's default (the only one today)"`
	Setup       string   `json:"setup,omitempty" jsonschema:"a shell script run as root before the agent (packages, toolchains)"`
	Install     []string `json:"install,omitempty" jsonschema:"commands run as the agent in the first repository after the clone, in order (dependency install, e.g. npm ci); a failure fails the box"`
	Env         []string `json:"env,omitempty" jsonschema:"non-secret environment for the agent as KEY=VALUE; names like *_TOKEN, *_KEY, *PASSWORD* and those sbx sets are refused"`
	Allow       []string `json:"allow,omitempty" jsonschema:"egress entries (example.com, *.example.com, example.com:8443) or presets (@npm)"`
	MemoryMiB   int      `json:"memory_mib,omitempty" jsonschema:"the box's memory in MiB; omitted: the default"`
	CPUs        int      `json:"cpus,omitempty" jsonschema:"the box's vCPUs; omitted: the default"`
	MaxDuration string   `json:"max_duration,omitempty" jsonschema:"how long the box may run, e.g. 2h; omitted: the gateway's; at most box.max_lifetime"`
	Agent       string   `json:"agent,omitempty" jsonschema:"claude (default) or script"`
}

// ProfileDeleteIn removes a profile.
type ProfileDeleteIn struct {
	Name string `json:"name" jsonschema:"the profile's name"`
	Site bool   `json:"site,omitempty" jsonschema:"the site profile of that name (admins only); omitted: yours"`
}

// ProfileDeleteOut says what was removed.
type ProfileDeleteOut struct {
	Removed string `json:"removed"`
	Site    bool   `json:"site"`
}

// ProfileDefaultIn sets or clears a repository's default profile.
type ProfileDefaultIn struct {
	Repo    string `json:"repo" jsonschema:"owner/name, or an https URL on the configured git host"`
	Profile string `json:"profile,omitempty" jsonschema:"the profile delegations of repo use when they name none; empty: clear the default"`
}

func (h *handler) addProfileTools() {
	add(h, tool{name: "profiles", title: "Project profiles",
		desc: "List your project profiles, the site's (shadowed ones marked: yours of the same name wins) and your per-repository defaults. " +
			"A profile names a box's setup, dependency install, environment, egress, size, max duration and agent; pass profile to delegate."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, fleet.ProfilesView, error) {
			v, err := h.fleet.Profiles(ctx, c.actor)
			return nil, v, err
		})

	add(h, tool{name: "profile_set", title: "Save a project profile", write: true, idempotent: true,
		desc: "Create or replace a project profile (the whole profile: fields you omit are cleared). Every field is validated; " +
			"the environment is not secret: give credentials through accounts or MCP servers."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ProfileSetIn) (*sdk.CallToolResult, fleet.Profile, error) {
			p := fleet.Profile{Name: in.Name, Image: in.Image, Setup: in.Setup, Install: in.Install, Env: in.Env, Allow: in.Allow,
				MemoryMiB: in.MemoryMiB, VCPUs: in.CPUs, MaxDuration: in.MaxDuration, Agent: in.Agent}
			if in.Site {
				p.Scope = fleet.ScopeSite
			}
			saved, err := h.fleet.SaveProfile(ctx, c.actor, p)
			return nil, saved, err
		})

	add(h, tool{name: "profile_delete", title: "Remove a project profile", write: true, destructive: true,
		desc: "Remove one of your project profiles (site: a site profile, admins only)."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ProfileDeleteIn) (*sdk.CallToolResult, ProfileDeleteOut, error) {
			if err := h.fleet.DeleteProfile(ctx, c.actor, in.Name, in.Site); err != nil {
				return nil, ProfileDeleteOut{}, err
			}
			return nil, ProfileDeleteOut{Removed: in.Name, Site: in.Site}, nil
		})

	add(h, tool{name: "profile_default", title: "Set a repository's default profile", write: true, idempotent: true,
		desc: "Make a profile the default of your delegations whose first repository is repo (an empty profile clears it)."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ProfileDefaultIn) (*sdk.CallToolResult, fleet.RepoDefault, error) {
			if in.Profile == "" {
				d, err := h.fleet.ClearRepoProfile(ctx, c.actor, in.Repo)
				return nil, d, err
			}
			d, err := h.fleet.SetRepoProfile(ctx, c.actor, in.Repo, in.Profile)
			return nil, d, err
		})
}
