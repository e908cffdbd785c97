package web

import (
	"context"
	"io"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// boxes is what the console calls on the core: the subset of *fleet.Fleet
// it uses, with Logs returning an interface so the console's own tests can
// feed it a scripted core (XSS corpus, 100-box fleet) without QEMU.
type boxes interface {
	List(ctx context.Context, caller keys.Actor) ([]fleet.Box, error)
	Get(ctx context.Context, caller keys.Actor, name string) (fleet.Box, error)
	Logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (logStream, error)
	Answer(ctx context.Context, caller keys.Actor, name, text string) (fleet.AnswerResult, error)
	FollowUp(ctx context.Context, caller keys.Actor, name, text string, force bool) (fleet.AnswerResult, error)
	Inbox(ctx context.Context, caller keys.Actor, name string) ([]fleet.InboxItem, error)
	RemoveInbox(ctx context.Context, caller keys.Actor, name string, id int64) error
	Diff(ctx context.Context, caller keys.Actor, name string) (fleet.Diff, error)
	Ask(ctx context.Context, caller keys.Actor, name, question string, fresh bool) (redact.Safe, error)
	EditAllow(ctx context.Context, caller keys.Actor, name string, add, remove []string) (fleet.Box, error)
	Sleep(ctx context.Context, caller keys.Actor, name string) (fleet.Box, error)
	Wake(ctx context.Context, caller keys.Actor, name string) (fleet.Box, error)
	Keep(ctx context.Context, caller keys.Actor, name string, keep bool) (fleet.Box, error)
	Extend(ctx context.Context, caller keys.Actor, name string, by time.Duration) (fleet.Box, error)
	Checkpoint(ctx context.Context, caller keys.Actor, name, label string) (fleet.Checkpoint, error)
	Checkpoints(ctx context.Context, caller keys.Actor, name string) ([]fleet.Checkpoint, error)
	Rewind(ctx context.Context, caller keys.Actor, name, id string) (fleet.Box, error)
	Fork(ctx context.Context, caller keys.Actor, name, task string) (fleet.Box, error)
	DeleteCheckpoint(ctx context.Context, caller keys.Actor, name, id string) error
	Destroy(ctx context.Context, caller keys.Actor, name string) error
	MentionedRepos(task string, given []fleet.RepoSpec) []string
	Repos(ctx context.Context, caller keys.Actor, account, query string) ([]forge.RepoInfo, error)
	SetTitle(ctx context.Context, caller keys.Actor, name, title string) (fleet.Box, error)
	AddRepo(ctx context.Context, caller keys.Actor, name string, repo fleet.RepoSpec) (fleet.Box, error)
	Events(ctx context.Context, caller keys.Actor) <-chan fleet.Event
	ReadDir(ctx context.Context, caller keys.Actor, name, path string) ([]fleet.FileInfo, error)
	Artifact(ctx context.Context, caller keys.Actor, name, path string) (io.ReadCloser, fleet.FileInfo, error)
	Delegate(ctx context.Context, caller keys.Actor, req fleet.DelegateRequest) (fleet.Box, error)
	AddAccount(ctx context.Context, caller keys.Actor, name, token, probeRepo string) (accounts.Account, error)
	Accounts(ctx context.Context, caller keys.Actor) ([]accounts.Account, error)
	RemoveAccount(ctx context.Context, caller keys.Actor, name string) error
	SetDefaultAccount(ctx context.Context, caller keys.Actor, name string) error
	MCPServers(ctx context.Context, caller keys.Actor) ([]fleet.MCPServer, error)
	AddMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string) (fleet.MCPServer, error)
	RemoveMCPServer(ctx context.Context, caller keys.Actor, name string) error
	OpenPR(ctx context.Context, caller keys.Actor, name string, req fleet.PRRequest) (fleet.PR, error)
	MergePR(ctx context.Context, caller keys.Actor, name, repo string, method forge.MergeMethod) (fleet.PR, error)
	ClosePR(ctx context.Context, caller keys.Actor, name, repo string) (fleet.PR, error)
}

// logStream is fleet.LogStream as the console uses it.
type logStream interface {
	Next(ctx context.Context) (fleet.Chunk, error)
	Close() error
}

// coreBoxes adapts *fleet.Fleet to boxes.
type coreBoxes struct{ *fleet.Fleet }

func (c coreBoxes) Logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (logStream, error) {
	s, err := c.Fleet.Logs(ctx, caller, name, from, follow)
	if err != nil {
		return nil, err
	}
	return s, nil
}

var _ boxes = coreBoxes{}
