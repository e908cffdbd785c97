package fleet

import (
	"fmt"
	"time"

	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/redact"
)

// Errors are the kinds every layer shares (errkind), under the names the
// core has always used; errkind.HTTPStatus and the fronts map them. The
// core wraps them with a message that names the input; fronts show
// err.Error() as is (the core has already redacted it).
var (
	// ErrNotFound: no such box, or a box the caller may not see (the two
	// answer identically, so a box's existence never leaks).
	ErrNotFound = errkind.NotFound
	// ErrInvalid: bad input (empty task, bad name, unknown profile, bad ref).
	ErrInvalid = errkind.Invalid
	// ErrLimit: a cap (boxes per user, per host, memory, budget) refused it.
	ErrLimit = errkind.Limit
	// ErrConflict: the box is not in a state that allows it (answer with no
	// pending question, wake of a running box, ...).
	ErrConflict = errkind.Conflict
	// ErrForbidden: the caller's role may not do it (pool for operators).
	ErrForbidden = errkind.Forbidden
	// ErrScope: the API key the call came through lacks the scope for it
	// (it is an ErrForbidden too; its message names the scope to ask for).
	ErrScope = fmt.Errorf("api key scope: %w", ErrForbidden)
	// ErrUnavailable: a dependency failed (git host unreachable, box did not
	// boot). Retrying later may work.
	ErrUnavailable = errkind.Unavailable
)

// State is where a box is, as fronts show it. It refines vm.State with the
// agent's run: running (a turn is in progress), waiting (a question is
// pending), done (the turn ended; follow-ups resume it).
type State string

const (
	Creating  State = "creating"
	Running   State = "running"
	Waiting   State = "waiting"
	Done      State = "done"
	Sleeping  State = "sleeping"
	Failed    State = "failed"
	Destroyed State = "destroyed"
)

// RepoSpec is one repository a delegation asks for.
type RepoSpec struct {
	// Repo is "owner/name" or an https URL on the configured git host.
	Repo string `json:"repo"`
	// Ref is a branch, tag or commit; empty means the default branch.
	Ref string `json:"ref,omitempty"`
}

// Repo is a repository as it sits in a box.
type Repo struct {
	Name    string `json:"name"`    // owner/name
	Dir     string `json:"dir"`     // directory under /workspace
	Ref     string `json:"ref"`     // what was asked for ("" = default branch)
	Base    string `json:"base"`    // commit the diff is taken against
	Branch  string `json:"branch"`  // the branch the agent works on
	Account string `json:"account"` // the GitHub account that reached it
	URL     string `json:"url"`     // clone URL without credentials
	Push    bool   `json:"push"`    // the delegation allows pushing Branch
}

// DelegateRequest is what a front asks the core to start.
type DelegateRequest struct {
	Task  string     `json:"task"`
	Repos []RepoSpec `json:"repos,omitempty"`
	// Agent is the profile: "claude" (default) or "script".
	Agent string `json:"agent,omitempty"`
	// Allow lists extra egress domains ("example.com", "*.example.com").
	Allow []string `json:"allow,omitempty"`
	// Keep exempts the box from the sleep TTL.
	Keep bool `json:"keep,omitempty"`
	// MemoryMiB and VCPUs size the box's machine (0: the default size),
	// within the caps (box.max_memory_mib, box.max_cpus, and per user).
	MemoryMiB int `json:"memory_mib,omitempty"`
	VCPUs     int `json:"vcpus,omitempty"`
	// Setup is a shell script run as root in the box after its repos are
	// copied in and before the agent starts (packages, toolchains): the
	// root work a project needs, on the operator's word (see setup.go).
	Setup string `json:"setup,omitempty"`
	// Profile names a project profile (profiles.go) the box starts from:
	// the caller's own or the site's. "": the caller's default for the
	// first repository, if any. The request's own fields override
	// (agent, memory, vCPUs) or add to (allow, setup) the profile's.
	Profile string `json:"profile,omitempty"`
	// Progress, when set, is told of each step as it starts and as it
	// ends (see Step), in order, on the goroutine that called Delegate: it
	// must not block for long.
	Progress func(Step) `json:"-"`
}

// Box is what a front sees of one box. Everything that came from inside the
// box, or could carry a secret, is redact.Safe.
type Box struct {
	Name  string      `json:"name"`
	Owner string      `json:"owner"`
	State State       `json:"state"`
	Agent string      `json:"agent"`
	Task  redact.Safe `json:"task"`
	// Title is a short line for lists: DefaultTitle of the task unless set
	// with SetTitle. The name never changes.
	Title    redact.Safe `json:"title"`
	Repos    []Repo      `json:"repos"`
	Allow    []string    `json:"allow"`
	Keep     bool        `json:"keep"`
	Question redact.Safe `json:"question,omitzero"`
	// Reason says why the box failed or how it last woke.
	Reason  redact.Safe `json:"reason,omitzero"`
	Created time.Time   `json:"created"`
	Updated time.Time   `json:"updated"`
	// LastOutput is when the agent last wrote to the log.
	LastOutput time.Time `json:"last_output,omitzero"`
	// SleptAt is when the box went to sleep (the TTL counts from it).
	SleptAt time.Time `json:"slept_at,omitzero"`
	// Deadline is when the max duration ends (zero: no limit); Extend
	// pushes it out.
	Deadline time.Time `json:"deadline,omitzero"`
	// MemoryMiB and VCPUs are the size of the box's machine.
	MemoryMiB int `json:"memory_mib"`
	VCPUs     int `json:"vcpus"`
	// Profile is the project profile the box was delegated with ("":
	// none).
	Profile string `json:"profile,omitempty"`
	// Expires is when a sleeping box that is not kept will be destroyed.
	Expires time.Time `json:"expires,omitzero"`
	Turns   int       `json:"turns"`
	Inbox   int       `json:"inbox"`
	LogSize int64     `json:"log_size"`
	CostUSD float64   `json:"cost_usd,omitempty"`
	// PRs are the cards of the box's pull requests as the forge last
	// showed them (newest first, without their bodies): the watcher keeps
	// open ones fresh; PR asks the forge at once.
	PRs []PR `json:"prs,omitempty"`
}

// InboxItem is a follow-up queued while the agent was mid-turn.
type InboxItem struct {
	ID   int64       `json:"id"`
	Text redact.Safe `json:"text"`
	At   time.Time   `json:"at"`
	By   string      `json:"by"`
}

// AnswerResult says what an answer did.
type AnswerResult struct {
	// Answered: a pending question was answered and the agent resumed.
	// Resumed: a follow-up started a new turn. Queued: the agent was
	// mid-turn, so the text waits in the inbox (InboxID).
	Outcome string `json:"outcome"`
	InboxID int64  `json:"inbox_id,omitempty"`
	Box     Box    `json:"box"`
}

// Outcomes of Answer.
const (
	Answered = "answered"
	Resumed  = "resumed"
	Queued   = "queued"
)

// FileStat is one file of a diff.
type FileStat struct {
	Path    redact.Safe `json:"path"`
	Added   int         `json:"added"`
	Deleted int         `json:"deleted"`
	Binary  bool        `json:"binary,omitempty"`
}

// Diff is the box's change against each repo's base commit.
type Diff struct {
	Files []FileStat  `json:"files"`
	Patch redact.Safe `json:"patch"`
}

// Event is one change of a box that fronts may show: a state transition, a
// question, new output (coalesced), an inbox change, removal.
type Event struct {
	Box   string      `json:"box"`
	Owner string      `json:"owner"`
	Kind  string      `json:"kind"` // "state", "question", "output", "inbox", "removed", "pr", "pr_checks", "title"
	State State       `json:"state"`
	Note  redact.Safe `json:"note,omitzero"`
	At    time.Time   `json:"at"`
	// PR is the pull request an EventPR or EventPRChecks is about.
	PR *PRRef `json:"pr,omitempty"`
}

// Event kinds.
const (
	EventState    = "state"
	EventQuestion = "question"
	EventOutput   = "output"
	EventInbox    = "inbox"
	EventRemoved  = "removed"
	// EventPR: one of the box's pull requests changed (opened, a new
	// head, merged or closed, through sbx or on the forge). Event.PR says
	// which and how it stands.
	EventPR = "pr"
	// EventPRChecks: the checks of a pull request's head finished
	// (Event.PR.Checks is success or failure; Note says so in words). Sent
	// once per head and outcome, by the gateway that polls the forge.
	EventPRChecks = "pr_checks"
	EventTitle    = "title"
)

// PoolStatus is the warm pool as an admin sees it.
type PoolStatus struct {
	Target  int `json:"target"`
	Ready   int `json:"ready"`
	Booting int `json:"booting"`
}
