package fleet

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// This file is the core's whole surface for fronts. Every method takes the
// caller and resolves the box through them: an operator sees their own
// boxes, an admin every box. A box the caller may not see answers exactly
// like a box that does not exist (ErrNotFound). Every state change is an
// audit row and an Event; every text from a box comes back redact.Safe and
// every error already redacted. A caller acting through an API key needs
// the key's read right for what only reads and its write right for what
// changes anything (need, in scope.go).

// Delegate starts a task in a box: it checks the request (non-empty task,
// known profile, reachable repos and refs, caps) before creating anything,
// claims a warm box or boots one, puts each repo into /workspace, installs
// the agent's settings and hooks, and starts the agent. It returns once the
// agent has started; follow the log with Logs.
func (f *Fleet) Delegate(ctx context.Context, caller keys.Actor, req DelegateRequest) (Box, error) {
	if err := need(caller, keys.RightWrite, "delegate"); err != nil {
		return Box{}, err
	}
	return f.delegate(ctx, caller, req)
}

// List returns the boxes the caller may see, newest first.
func (f *Fleet) List(ctx context.Context, caller keys.Actor) ([]Box, error) {
	if err := need(caller, keys.RightRead, "list"); err != nil {
		return nil, err
	}
	return f.list(ctx, caller)
}

// Get returns one box.
func (f *Fleet) Get(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	if err := need(caller, keys.RightRead, "get"); err != nil {
		return Box{}, err
	}
	return f.get(ctx, caller, name)
}

// Logs streams the box's log (the readable transcript of every turn, one
// file per box with stable byte offsets) from offset from, redacted. With
// follow, the stream stays open for new output and ends (io.EOF) when the
// box is destroyed or ctx ends; without, it ends at the current end. An
// offset inside a line starts at that line's beginning (a line is never
// redacted from its middle), so resume with a Chunk's Offset.
func (f *Fleet) Logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (*LogStream, error) {
	if err := need(caller, keys.RightRead, "logs"); err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("offset %d: want 0 or more: %w", from, ErrInvalid)
	}
	if _, err := f.locks.resolve(ctx, caller, name); err != nil {
		return nil, f.safeErr(err)
	}
	return f.logs.stream(ctx, name, from, follow)
}

// Answer answers the pending question: the question file is cleared, the
// agent resumes with text as its next message, and the box shows running at
// once (a sleeping box is woken first). With no pending question it is
// ErrConflict: use FollowUp to send a new message.
func (f *Fleet) Answer(ctx context.Context, caller keys.Actor, name, text string) (AnswerResult, error) {
	if err := need(caller, keys.RightWrite, "answer"); err != nil {
		return AnswerResult{}, err
	}
	return f.answer(ctx, caller, name, text, false, true)
}

// FollowUp sends the agent a message: it answers a pending question, starts
// a new turn when the agent is done, and mid-turn queues it in the inbox
// (Outcome Queued) unless force, which interrupts the turn and resumes
// with text.
func (f *Fleet) FollowUp(ctx context.Context, caller keys.Actor, name, text string, force bool) (AnswerResult, error) {
	if err := need(caller, keys.RightWrite, "follow up"); err != nil {
		return AnswerResult{}, err
	}
	return f.answer(ctx, caller, name, text, force, false)
}

// Inbox lists the follow-ups queued for the box, oldest first.
func (f *Fleet) Inbox(ctx context.Context, caller keys.Actor, name string) ([]InboxItem, error) {
	if err := need(caller, keys.RightRead, "inbox"); err != nil {
		return nil, err
	}
	return f.inbox(ctx, caller, name)
}

// RemoveInbox deletes one queued follow-up.
func (f *Fleet) RemoveInbox(ctx context.Context, caller keys.Actor, name string, id int64) error {
	if err := need(caller, keys.RightWrite, "remove inbox"); err != nil {
		return err
	}
	return f.removeInbox(ctx, caller, name, id)
}

// Ask runs a side question in the box under the read-only hook, without
// disturbing the driver's run, and returns the answer. fresh starts a new
// side thread instead of continuing the previous one.
func (f *Fleet) Ask(ctx context.Context, caller keys.Actor, name, question string, fresh bool) (redact.Safe, error) {
	if err := need(caller, keys.RightWrite, "ask"); err != nil {
		return redact.Safe{}, err
	}
	return f.ask(ctx, caller, name, question, fresh)
}

// Diff is the change in every repo of the box against its base commit.
func (f *Fleet) Diff(ctx context.Context, caller keys.Actor, name string) (Diff, error) {
	if err := need(caller, keys.RightRead, "diff"); err != nil {
		return Diff{}, err
	}
	return f.files.diff(ctx, caller, name)
}

// Sleep saves the box and ends its machine; Wake brings it back.
func (f *Fleet) Sleep(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	if err := need(caller, keys.RightWrite, "sleep"); err != nil {
		return Box{}, err
	}
	return f.sleep(ctx, caller, name, "")
}

// Wake brings a sleeping box back.
func (f *Fleet) Wake(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	if err := need(caller, keys.RightWrite, "wake"); err != nil {
		return Box{}, err
	}
	return f.wake(ctx, caller, name)
}

// Keep exempts the box from the sleep TTL (keep=true) or ends that.
func (f *Fleet) Keep(ctx context.Context, caller keys.Actor, name string, keep bool) (Box, error) {
	if err := need(caller, keys.RightWrite, "keep"); err != nil {
		return Box{}, err
	}
	return f.keep(ctx, caller, name, keep)
}

// Extend pushes the box's max-duration deadline out by by (owner or
// admin), within box.max_lifetime from the box's start (ErrLimit beyond
// it, saying how far it can still go). It moves the machine's own timer
// and survives a gateway restart; an audit row (box.extend) and an event.
func (f *Fleet) Extend(ctx context.Context, caller keys.Actor, name string, by time.Duration) (Box, error) {
	if err := need(caller, keys.RightWrite, "extend"); err != nil {
		return Box{}, err
	}
	return f.extend(ctx, caller, name, by)
}

// Destroy ends the box and removes everything it had; its log stays
// readable until then, and followers get io.EOF.
func (f *Fleet) Destroy(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "destroy"); err != nil {
		return err
	}
	return f.destroy(ctx, caller, name)
}

// SetAllow replaces the box's egress allow-list.
func (f *Fleet) SetAllow(ctx context.Context, caller keys.Actor, name string, domains []string) (Box, error) {
	if err := need(caller, keys.RightWrite, "set allow"); err != nil {
		return Box{}, err
	}
	return f.setAllow(ctx, caller, name, domains)
}

// EditAllow adds domains to the box's egress allow-list and takes others
// out, in one change (the list as it is when the change lands, not as the
// caller last read it).
func (f *Fleet) EditAllow(ctx context.Context, caller keys.Actor, name string, add, remove []string) (Box, error) {
	if err := need(caller, keys.RightWrite, "set allow"); err != nil {
		return Box{}, err
	}
	return f.editAllow(ctx, caller, name, add, remove)
}

// SetTitle changes the box's title (1–80 printable characters, one line);
// its name stays. Owner or admin, audited, an EventTitle.
func (f *Fleet) SetTitle(ctx context.Context, caller keys.Actor, name, title string) (Box, error) {
	if err := need(caller, keys.RightWrite, "set title"); err != nil {
		return Box{}, err
	}
	return f.setTitle(ctx, caller, name, title)
}

// AddRepo puts one more repository into the box (waking it when it
// sleeps), with delegate's checks: the repo and ref must be reachable by
// one of the caller's accounts, it is cloned on the host (the token never
// enters the box), copied to /workspace/NAME on a new branch sbx/BOX, and
// the box may push that branch only. A repo the box has is ErrConflict;
// beyond MaxRepos, ErrLimit. Owner or admin, audited, an Event.
func (f *Fleet) AddRepo(ctx context.Context, caller keys.Actor, name string, repo RepoSpec) (Box, error) {
	if err := need(caller, keys.RightWrite, "add repo"); err != nil {
		return Box{}, err
	}
	return f.addRepo(ctx, caller, name, repo)
}

// Stats samples the box's CPU and memory (zero for a box without a machine).
func (f *Fleet) Stats(ctx context.Context, caller keys.Actor, name string) (Stats, error) {
	if err := need(caller, keys.RightRead, "stats"); err != nil {
		return Stats{}, err
	}
	return f.stats(ctx, caller, name)
}

// Events streams changes of the boxes the caller may see until ctx ends. A
// subscriber that falls far behind loses the surplus, never the core.
func (f *Fleet) Events(ctx context.Context, caller keys.Actor) <-chan Event {
	if need(caller, keys.RightRead, "events") != nil {
		ch := make(chan Event)
		close(ch)
		return ch
	}
	return f.events.subscribe(ctx, caller)
}

// Exec starts a process in the box (waking it first when it sleeps:
// Process.Woke says so). Its output is redacted as it streams.
func (f *Fleet) Exec(ctx context.Context, caller keys.Actor, name string, req ExecRequest) (*Process, error) {
	if err := need(caller, keys.RightWrite, "exec"); err != nil {
		return nil, err
	}
	return f.exec(ctx, caller, name, req)
}

// Stat describes path under the box's /workspace (name and link
// redacted). Like every file operation it never wakes the box: a sleeping
// one answers ErrConflict.
func (f *Fleet) Stat(ctx context.Context, caller keys.Actor, name, path string) (FileInfo, error) {
	if err := need(caller, keys.RightRead, "stat"); err != nil {
		return FileInfo{}, err
	}
	return f.files.stat(ctx, caller, name, path)
}

// ReadDir lists a directory under the box's /workspace, names redacted.
func (f *Fleet) ReadDir(ctx context.Context, caller keys.Actor, name, path string) ([]FileInfo, error) {
	if err := need(caller, keys.RightRead, "read dir"); err != nil {
		return nil, err
	}
	return f.files.readDir(ctx, caller, name, path)
}

// Artifact streams a file from the box's /workspace, redacted: text and
// binary alike, so its length may differ from FileInfo.Size.
func (f *Fleet) Artifact(ctx context.Context, caller keys.Actor, name, path string) (io.ReadCloser, FileInfo, error) {
	if err := need(caller, keys.RightRead, "artifact"); err != nil {
		return nil, FileInfo{}, err
	}
	return f.files.artifact(ctx, caller, name, path)
}

// WriteFile writes r to path under the box's /workspace (owner or admin).
func (f *Fleet) WriteFile(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode, r io.Reader) error {
	if err := need(caller, keys.RightWrite, "write file"); err != nil {
		return err
	}
	return f.files.writeFile(ctx, caller, name, path, mode, r)
}

// MkdirAll creates a directory path under the box's /workspace.
func (f *Fleet) MkdirAll(ctx context.Context, caller keys.Actor, name, path string, mode fs.FileMode) error {
	if err := need(caller, keys.RightWrite, "mkdir all"); err != nil {
		return err
	}
	return f.files.mkdirAll(ctx, caller, name, path, mode)
}

// Remove deletes path under the box's /workspace.
func (f *Fleet) Remove(ctx context.Context, caller keys.Actor, name, path string) error {
	if err := need(caller, keys.RightWrite, "remove"); err != nil {
		return err
	}
	return f.files.remove(ctx, caller, name, path)
}

// AddAccount checks token with the forge's API (who it belongs to, its
// scopes and expiry: Account.Identity) and, when probeRepo is named, that
// it can read that repository; then it saves it sealed as one of the
// caller's GitHub accounts.
func (f *Fleet) AddAccount(ctx context.Context, caller keys.Actor, name, token, probeRepo string) (accounts.Account, error) {
	if err := need(caller, keys.RightWrite, "add account"); err != nil {
		return accounts.Account{}, err
	}
	return f.settings.addAccount(ctx, caller, name, token, probeRepo)
}

// Accounts lists the caller's GitHub accounts, tokens masked.
func (f *Fleet) Accounts(ctx context.Context, caller keys.Actor) ([]accounts.Account, error) {
	if err := need(caller, keys.RightRead, "accounts"); err != nil {
		return nil, err
	}
	return f.settings.accounts.List(ctx, caller, caller.User)
}

// RemoveAccount deletes one of the caller's accounts.
func (f *Fleet) RemoveAccount(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "remove account"); err != nil {
		return err
	}
	return f.settings.removeAccount(ctx, caller, name)
}

// SetDefaultAccount makes name the caller's default account.
func (f *Fleet) SetDefaultAccount(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "set default account"); err != nil {
		return err
	}
	return f.settings.accounts.SetDefault(ctx, caller, caller.User, name)
}

// Pool reports the warm pool (admins only).
func (f *Fleet) Pool(ctx context.Context, caller keys.Actor) (PoolStatus, error) {
	if err := need(caller, keys.RightRead, "pool"); err != nil {
		return PoolStatus{}, err
	}
	return f.pool.status(caller)
}

// SetPool changes the warm pool's target size (admins only).
func (f *Fleet) SetPool(ctx context.Context, caller keys.Actor, n int) (PoolStatus, error) {
	if err := need(caller, keys.RightWrite, "set pool"); err != nil {
		return PoolStatus{}, err
	}
	return f.pool.setSize(ctx, caller, n)
}

// AddMCPServer saves an MCP server (Streamable HTTP) the caller's boxes may
// reach through the gateway's relay at http://10.0.2.100/mcp/NAME. The
// headers (the server's secrets) are sealed at rest, added by the gateway on
// the way out, and never enter a box.
func (f *Fleet) AddMCPServer(ctx context.Context, caller keys.Actor, name, rawURL string, headers map[string]string) (MCPServer, error) {
	if err := need(caller, keys.RightWrite, "add MCP server"); err != nil {
		return MCPServer{}, err
	}
	return f.settings.addMCPServer(ctx, caller, name, rawURL, headers)
}

// MCPServers lists the caller's MCP servers (header names only).
func (f *Fleet) MCPServers(ctx context.Context, caller keys.Actor) ([]MCPServer, error) {
	if err := need(caller, keys.RightRead, "list MCP servers"); err != nil {
		return nil, err
	}
	return f.settings.listMCPServers(ctx, caller)
}

// RemoveMCPServer deletes one of the caller's MCP servers.
func (f *Fleet) RemoveMCPServer(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "remove MCP server"); err != nil {
		return err
	}
	return f.settings.removeMCPServer(ctx, caller, name)
}

// OpenPR opens a pull request from the box's branch of a repository it may
// push (PRRequest.Repo, or its only one): the branch is pushed from inside
// the box first (a sleeping box is woken), then the forge opens it with
// the token of the account that reached the repository. A pull request
// already open from that branch is returned instead (Opened false), its
// head now what was pushed. Nothing to push beyond the box's start is
// ErrInvalid.
func (f *Fleet) OpenPR(ctx context.Context, caller keys.Actor, name string, req PRRequest) (PR, error) {
	if err := need(caller, keys.RightWrite, "open pull request"); err != nil {
		return PR{}, err
	}
	return f.openPR(ctx, caller, name, req)
}

// PR is the live card of the box's newest pull request from repo ("" for
// its only pushable repository), asked of the forge.
func (f *Fleet) PR(ctx context.Context, caller keys.Actor, name, repo string) (PR, error) {
	if err := need(caller, keys.RightRead, "pull request"); err != nil {
		return PR{}, err
	}
	return f.pr(ctx, caller, name, repo)
}

// MergePR merges the box's open pull request from repo by method ("" is
// a merge commit), at the head its card last showed: if the branch moved
// since, it is ErrConflict (look at the card again).
func (f *Fleet) MergePR(ctx context.Context, caller keys.Actor, name, repo string, method forge.MergeMethod) (PR, error) {
	if err := need(caller, keys.RightWrite, "merge pull request"); err != nil {
		return PR{}, err
	}
	return f.mergePR(ctx, caller, name, repo, method)
}

// ClosePR closes the box's open pull request from repo without merging.
func (f *Fleet) ClosePR(ctx context.Context, caller keys.Actor, name, repo string) (PR, error) {
	if err := need(caller, keys.RightWrite, "close pull request"); err != nil {
		return PR{}, err
	}
	return f.closePR(ctx, caller, name, repo)
}

// Repos lists the repositories the caller's account ("" for their
// default) can reach on the forge whose owner/name holds query, most
// recently updated first.
func (f *Fleet) Repos(ctx context.Context, caller keys.Actor, account, query string) ([]forge.RepoInfo, error) {
	if err := need(caller, keys.RightRead, "list repositories"); err != nil {
		return nil, err
	}
	return f.repos(ctx, caller, account, query)
}

// The box network's side (gateway/boxnet): it acts for a machine, named by
// the socket its connection came through, never for a caller.

// NetGrant returns the current grant of a machine's network path.
func (f *Fleet) NetGrant(ctx context.Context, vmName string) (NetGrant, error) {
	return f.grants.grant(ctx, vmName)
}

// SpendModel adds usage to a machine's model budget and refuses it (adding
// nothing) when it would pass maxRequests or maxTokens (0: no bound).
func (f *Fleet) SpendModel(ctx context.Context, vmName string, u ModelUsage, maxRequests, maxTokens int64) error {
	return f.grants.spendModel(ctx, vmName, u, maxRequests, maxTokens)
}

// MCPSecrets returns every MCP header value owner's servers hold, for the
// redactor's list of known secrets (and for nothing else).
func (f *Fleet) MCPSecrets(ctx context.Context, owner string) ([]string, error) {
	return f.settings.mcpSecrets(ctx, owner)
}
