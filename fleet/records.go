package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// record is a box as the store keeps it: what Box shows plus the core's own
// bookkeeping. It is stored as one JSON document per box (with name, owner
// and state as columns), so a field added here needs no migration.
type record struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	VM    string `json:"vm"` // the vm.Manager's name (a claimed pool box keeps its own)
	State State  `json:"state"`
	Agent string `json:"agent"`
	Task  string `json:"task"`
	// Title is the box's short title (DefaultTitle of the task unless
	// set); the store keeps it in a column of its own as well.
	Title   string    `json:"title,omitempty"`
	Repos   []Repo    `json:"repos"`
	Allow   []string  `json:"allow"`
	Keep    bool      `json:"keep"`
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Started time.Time `json:"started,omitzero"`
	// Question is the pending question ("" when none).
	Question   string    `json:"question,omitempty"`
	LastOutput time.Time `json:"last_output,omitzero"`
	SleptAt    time.Time `json:"slept_at,omitzero"`
	Deadline   time.Time `json:"deadline,omitzero"`
	// MemoryMiB and VCPUs are the machine's size (0 in records from
	// before sizes: the policy's default).
	MemoryMiB int `json:"memory_mib,omitempty"`
	VCPUs     int `json:"vcpus,omitempty"`
	// Turn is the number of the current (or last) agent turn; 0 before the
	// first. TurnRaw is how many bytes of that turn's raw guest output the
	// log already holds, so a restarted gateway resumes exactly there.
	Turn     int   `json:"turn"`
	TurnRaw  int64 `json:"turn_raw"`
	TurnDone bool  `json:"turn_done"`
	// Session is the agent's conversation id (claude --resume); Side the
	// side-question lane's.
	Session string  `json:"session,omitempty"`
	Side    string  `json:"side,omitempty"`
	CostUSD float64 `json:"cost_usd,omitempty"`
	// Summary is the agent's last word on its last turn that said one
	// (its final result text), for a pull request's body.
	Summary string `json:"summary,omitempty"`
	// Model is the box's use of the model endpoint (its budget).
	Model ModelUsage `json:"model,omitzero"`
	// StateBeforeSleep is where the run was when the box went to sleep.
	StateBeforeSleep State `json:"state_before_sleep,omitempty"`
	// Profile is the project profile the box was delegated with ("":
	// none); Env is that profile's environment for the agent.
	Profile string   `json:"profile,omitempty"`
	Env     []string `json:"env,omitempty"`
	// CheckpointSessions is the agent's conversation at each checkpoint
	// of the box (by id), for a rewind to resume.
	CheckpointSessions map[string]string `json:"checkpoint_sessions,omitempty"`
}

// records keeps the boxes' records in the store: every read, write and
// state change of a box goes through it, with its audit row and its event.
type records struct {
	store  Store
	audit  *audit.Log
	events *events
	now    func() time.Time
	log    *slog.Logger
}

// notFound is the error of a box that does not exist (or that the caller
// may not see: the two read the same).
func notFound(name string) error { return fmt.Errorf("box %q: %w", name, ErrNotFound) }

// load reads a box's record.
func (r *records) load(ctx context.Context, name string) (record, error) {
	doc, err := r.store.GetBox(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return record{}, notFound(name)
	}
	if err != nil {
		return record{}, fmt.Errorf("load box %q: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal(doc.Doc, &rec); err != nil {
		return record{}, fmt.Errorf("load box %q: corrupt record: %w", name, err)
	}
	withTitle(&rec, doc)
	return rec, nil
}

func (r *records) loadAll(ctx context.Context) ([]record, error) {
	docs, err := r.store.ListBoxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	out := make([]record, 0, len(docs))
	for _, d := range docs {
		var rec record
		if err := json.Unmarshal(d.Doc, &rec); err != nil {
			r.log.Error("corrupt box record", "box", d.Name, "err", err)
			continue
		}
		withTitle(&rec, d)
		out = append(out, rec)
	}
	return out, nil
}

func doc(rec record) (BoxDoc, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return BoxDoc{}, err
	}
	return BoxDoc{Name: rec.Name, Owner: rec.Owner, State: string(rec.State), Title: rec.Title, Doc: b}, nil
}

// withTitle takes the box's title from its column, or derives it from the
// task for a row that has none.
func withTitle(rec *record, d BoxDoc) {
	if d.Title != "" {
		rec.Title = d.Title
	}
	if rec.Title == "" {
		rec.Title = DefaultTitle(rec.Task)
	}
}

// save writes rec with its audit row (zero Entry: bookkeeping only) and
// publishes a state event when the state changed.
func (r *records) save(ctx context.Context, rec record, e audit.Entry) error {
	prev := rec.State
	if old, err := r.load(ctx, rec.Name); err == nil {
		prev = old.State
	}
	rec.Updated = r.now()
	d, err := doc(rec)
	if err != nil {
		return err
	}
	if err := r.store.UpdateBox(ctx, d, e); err != nil {
		return fmt.Errorf("save box %q: %w", rec.Name, err)
	}
	if e.Action != "" {
		r.audit.Finish(ctx, e, nil, "")
	}
	if prev != rec.State {
		r.events.emit(rec, EventState, rec.Reason)
	}
	return nil
}

// transition moves a box to state, recorded as action by actor.
func (r *records) transition(ctx context.Context, rec *record, to State, actor keys.Actor, action, detail string) error {
	rec.State = to
	e := audit.Entry{}
	if action != "" {
		e = actor.Entry(r.now(), action, rec.Name)
		e.Detail = detail
	}
	return r.save(ctx, *rec, e)
}

// Store is what the core needs from the database. Each write takes the
// audit row of the change and stores both in one transaction.
type Store interface {
	InsertBox(ctx context.Context, b BoxDoc, rec audit.Entry) error
	// UpdateBox replaces the box's document; rec may be the zero Entry
	// (bookkeeping that is not an action: offsets, last output).
	UpdateBox(ctx context.Context, b BoxDoc, rec audit.Entry) error
	DeleteBox(ctx context.Context, name string, rec audit.Entry) error
	GetBox(ctx context.Context, name string) (BoxDoc, error)
	ListBoxes(ctx context.Context) ([]BoxDoc, error)

	AddInbox(ctx context.Context, box, by, text string, at time.Time, rec audit.Entry) (int64, error)
	ListInbox(ctx context.Context, box string) ([]InboxDoc, error)
	// DeleteInbox removes one item; found is false when it did not exist.
	DeleteInbox(ctx context.Context, box string, id int64, rec audit.Entry) (found bool, err error)

	// PutPR saves what the forge last said of a box's pull request
	// (inserted, or replacing the row of the same box, repo and number).
	PutPR(ctx context.Context, d PRDoc, rec audit.Entry) error
	// ListPRs returns a box's pull requests, the newest first.
	ListPRs(ctx context.Context, box string) ([]PRDoc, error)
	// OpenPRs returns every pull request last seen open, of every box.
	OpenPRs(ctx context.Context) ([]PRDoc, error)
	// MergedPRs returns owner's pull requests seen merged since then,
	// newest first (for the daily digest).
	MergedPRs(ctx context.Context, owner string, since time.Time) ([]PRDoc, error)
}

// BoxDoc is a box row: its key columns and its JSON document.
type BoxDoc struct {
	Name  string
	Owner string
	State string
	// Title is the box's title (its own column, for the store's readers).
	Title string
	Doc   []byte
}

// PRDoc is a box's pull request row: the key columns and the last card
// (a forge.PullRequest as JSON).
type PRDoc struct {
	Box     string
	Owner   string
	Repo    string // owner/name
	Number  int
	Account string
	URL     string
	Base    string
	Head    string
	HeadSHA string
	State   string
	Checks  string
	Card    []byte
	Updated time.Time
}

// InboxDoc is an inbox row.
type InboxDoc struct {
	ID   int64
	Box  string
	By   string
	Text string
	At   time.Time
}

// MCPServerDoc is an MCP server row; Headers is sealed.
type MCPServerDoc struct {
	Owner   string
	Name    string
	URL     string
	Headers []byte
	Created time.Time
}

// MCPStore keeps each user's MCP servers.
type MCPStore interface {
	InsertMCPServer(ctx context.Context, d MCPServerDoc, rec audit.Entry) error
	ListMCPServers(ctx context.Context, owner string) ([]MCPServerDoc, error)
	// DeleteMCPServer removes one; found is false when it did not exist.
	DeleteMCPServer(ctx context.Context, owner, name string, rec audit.Entry) (found bool, err error)
}
