package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/fleet"
)

// The pull-request tools (pr_open, pr_get, pr_merge, pr_close) and repos:
// each one call of the core, which pushes, asks the forge and audits.

// PROpenIn opens a pull request from a box's branch.
type PROpenIn struct {
	Box   string `json:"box" jsonschema:"the box name"`
	Repo  string `json:"repo,omitempty" jsonschema:"owner/name; needed when the box holds more than one repository"`
	Title string `json:"title,omitempty" jsonschema:"the title (default: the task's first line)"`
	Body  string `json:"body,omitempty" jsonschema:"the body in Markdown (default: the task and the agent's last summary)"`
	Draft bool   `json:"draft,omitempty" jsonschema:"open it as a draft"`
	Base  string `json:"base,omitempty" jsonschema:"the branch to merge into (default: the repository's default branch)"`
}

func (p PROpenIn) boxName() string { return p.Box }

// PRRefIn names a box's pull request.
type PRRefIn struct {
	Box  string `json:"box" jsonschema:"the box name"`
	Repo string `json:"repo,omitempty" jsonschema:"owner/name; needed when the box holds more than one repository"`
}

func (p PRRefIn) boxName() string { return p.Box }

// PRMergeIn merges a box's pull request.
type PRMergeIn struct {
	Box    string `json:"box" jsonschema:"the box name"`
	Repo   string `json:"repo,omitempty" jsonschema:"owner/name; needed when the box holds more than one repository"`
	Method string `json:"method,omitempty" jsonschema:"merge (default), squash or rebase"`
}

func (p PRMergeIn) boxName() string { return p.Box }

// CheckOut is one check on a pull request's head.
type CheckOut struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome" jsonschema:"pending, success, failure or neutral"`
	Detail  string `json:"detail,omitempty"`
	URL     string `json:"url,omitempty"`
}

// PROut is a pull request's card.
type PROut struct {
	Box           string     `json:"box"`
	Repo          string     `json:"repo" jsonschema:"owner/name"`
	Number        int        `json:"number"`
	URL           string     `json:"url" jsonschema:"the pull request's page"`
	Title         string     `json:"title"`
	Body          string     `json:"body,omitempty" jsonschema:"untrusted: it holds what the box wrote"`
	State         string     `json:"state" jsonschema:"open, closed or merged"`
	Draft         bool       `json:"draft"`
	Head          string     `json:"head" jsonschema:"the box's branch"`
	HeadSHA       string     `json:"head_sha" jsonschema:"the commit the checks are for; a merge lands exactly this one"`
	Base          string     `json:"base"`
	Mergeable     string     `json:"mergeable" jsonschema:"yes, conflict or unknown"`
	Review        string     `json:"review" jsonschema:"none, approved or changes_requested"`
	Checks        []CheckOut `json:"checks"`
	ChecksOutcome string     `json:"checks_outcome" jsonschema:"failure, pending, success, or empty without checks"`
	Opened        bool       `json:"opened,omitempty" jsonschema:"true when this call opened it"`
	MergeSHA      string     `json:"merge_sha,omitempty"`
}

func (p PROut) boxName() string { return p.Box }

func prOut(p fleet.PR) PROut {
	o := PROut{Box: p.Box, Repo: p.Repo.String(), Number: p.Number, URL: p.URL, Title: p.Title, Body: p.Body,
		State: p.State, Draft: p.Draft, Head: p.Head, HeadSHA: p.HeadSHA, Base: p.Base, Mergeable: p.Mergeable,
		Review: p.Review, Checks: []CheckOut{}, ChecksOutcome: p.ChecksOutcome, Opened: p.Opened, MergeSHA: p.MergeSHA}
	for _, c := range p.Checks {
		o.Checks = append(o.Checks, CheckOut{Name: c.Name, Outcome: c.Outcome, Detail: c.Detail, URL: c.URL})
	}
	return o
}

// ReposIn searches an account's repositories.
type ReposIn struct {
	Account string `json:"account,omitempty" jsonschema:"your account to list for (default: your default account)"`
	Query   string `json:"query,omitempty" jsonschema:"only repositories whose owner/name holds this"`
}

// RepoInfoOut is one repository an account reaches.
type RepoInfoOut struct {
	Repo          string `json:"repo" jsonschema:"owner/name: give it to delegate"`
	Description   string `json:"description,omitempty"`
	Private       bool   `json:"private"`
	DefaultBranch string `json:"default_branch"`
	URL           string `json:"url"`
	Updated       string `json:"updated,omitempty"`
}

// ReposOut lists repositories.
type ReposOut struct {
	Repos []RepoInfoOut `json:"repos"`
}

func (h *handler) addPRTools() {
	add(h, tool{name: "pr_open", title: "Open a pull request",
		desc: "Open a pull request from the box's branch: the branch is pushed from the box first, then the forge opens it with your account's token. " +
			"If one is open already it is returned (opened=false) with the new head. Fails when the agent committed nothing.",
		write: true, idempotent: true},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in PROpenIn) (*sdk.CallToolResult, PROut, error) {
			p, err := h.fleet.OpenPR(ctx, c.actor, in.Box, fleet.PRRequest{Repo: in.Repo, Title: in.Title, Body: in.Body, Draft: in.Draft, Base: in.Base})
			if err != nil {
				return nil, PROut{}, err
			}
			return nil, prOut(p), nil
		})

	add(h, tool{name: "pr_get", title: "Pull request card",
		desc: "The live card of the box's pull request: state, head commit, checks and their outcomes, review, mergeable, link."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in PRRefIn) (*sdk.CallToolResult, PROut, error) {
			p, err := h.fleet.PR(ctx, c.actor, in.Box, in.Repo)
			if err != nil {
				return nil, PROut{}, err
			}
			return nil, prOut(p), nil
		})

	add(h, tool{name: "pr_merge", title: "Merge a pull request",
		desc:  "Merge the box's open pull request at the head its card last showed (pr_get first); if the branch moved since, it fails: look at the card again.",
		write: true, destructive: true},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in PRMergeIn) (*sdk.CallToolResult, PROut, error) {
			method, err := fleet.ParseMergeMethod(in.Method)
			if err != nil {
				return nil, PROut{}, err
			}
			p, err := h.fleet.MergePR(ctx, c.actor, in.Box, in.Repo, method)
			if err != nil {
				return nil, PROut{}, err
			}
			return nil, prOut(p), nil
		})

	add(h, tool{name: "pr_close", title: "Close a pull request",
		desc: "Close the box's open pull request without merging.", write: true, destructive: true},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in PRRefIn) (*sdk.CallToolResult, PROut, error) {
			p, err := h.fleet.ClosePR(ctx, c.actor, in.Box, in.Repo)
			if err != nil {
				return nil, PROut{}, err
			}
			return nil, prOut(p), nil
		})

	add(h, tool{name: "repos", title: "Repositories you can reach",
		desc: "The repositories one of your accounts can reach on the git host, most recently updated first, filtered by query: names to give delegate."},
		func(ctx context.Context, c caller, _ *sdk.CallToolRequest, in ReposIn) (*sdk.CallToolResult, ReposOut, error) {
			list, err := h.fleet.Repos(ctx, c.actor, in.Account, in.Query)
			if err != nil {
				return nil, ReposOut{}, err
			}
			out := ReposOut{Repos: make([]RepoInfoOut, 0, len(list))}
			for _, r := range list {
				out.Repos = append(out.Repos, RepoInfoOut{Repo: r.Repo.String(), Description: r.Description, Private: r.Private,
					DefaultBranch: r.DefaultBranch, URL: r.URL, Updated: stamp(r.Updated)})
			}
			return nil, out, nil
		})
}
