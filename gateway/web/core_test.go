package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/fleet/runlog"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// scriptedCore is a core whose boxes the test writes by hand: any task,
// question, file name, repo name or log bytes (the XSS corpus, a 100-box
// fleet, a log fanned out to 500 browsers) without booting machines. Its
// text passes a real redact.Redactor, as the core's does. The real core
// drives the console in TestBrowserRealFleet.
type scriptedCore struct {
	red *redact.Redactor
	dir string // the boxes' logs (fleet/runlog files, as the core keeps them)

	mu      sync.Mutex
	boxes   map[string]*scriptedBox
	subs    map[chan fleet.Event]keys.Actor
	answers []string // every Answer/FollowUp text, in order
	// delegating, when set, runs first in Delegate: it reports the steps
	// (req.Progress) at the test's pace, and its error is Delegate's.
	delegating func(req fleet.DelegateRequest) error
}

type scriptedBox struct {
	box   fleet.Box
	log   *runlog.Log
	files map[string][]byte
	diff  string
	inbox []fleet.InboxItem
	// checkpoints are what Checkpoint saved, oldest first.
	checkpoints []fleet.Checkpoint
	// readErr, when set, is what Diff and ReadDir answer: a read that
	// fails after the page was drawn (the machine died meanwhile).
	readErr error
}

func newScriptedCore(red *redact.Redactor, dir string) *scriptedCore {
	return &scriptedCore{red: red, dir: dir, boxes: map[string]*scriptedBox{}, subs: map[chan fleet.Event]keys.Actor{}}
}

// close closes every box's log.
func (c *scriptedCore) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.boxes {
		_ = b.log.Close()
	}
}

func visible(c keys.Actor, owner string) bool { return c.Role == keys.RoleAdmin || c.User == owner }

// add creates a box owned by owner; task, repo and question are raw text.
func (c *scriptedCore) add(name, owner, task, repo string, created time.Time) {
	l, err := runlog.Open(c.dir, name)
	if err != nil {
		panic(err) // a test's own temp dir
	}
	c.mu.Lock()
	b := &scriptedBox{
		box: fleet.Box{Name: name, Owner: owner, State: fleet.Running, Agent: "script", Task: c.red.String(task), Title: c.red.String(fleet.DefaultTitle(task)),
			Repos: []fleet.Repo{}, Allow: []string{}, Created: created, Updated: created, LastOutput: created},
		log: l, files: map[string][]byte{},
	}
	if repo != "" {
		b.box.Repos = []fleet.Repo{{Name: repo, Branch: "sbx/" + name}}
	}
	c.boxes[name] = b
	c.mu.Unlock()
	c.emit(fleet.Event{Box: name, Owner: owner, Kind: fleet.EventState, State: fleet.Running, At: created})
}

func (c *scriptedCore) write(name, text string) {
	c.mu.Lock()
	b := c.boxes[name]
	owner := b.box.Owner
	c.mu.Unlock()
	if _, err := b.log.Write([]byte(text)); err != nil {
		panic(err)
	}
	c.emit(fleet.Event{Box: name, Owner: owner, Kind: fleet.EventOutput, At: time.Now()})
}

func (c *scriptedCore) ask(name, question string) {
	c.mu.Lock()
	b := c.boxes[name]
	b.box.Question, b.box.State = c.red.String(question), fleet.Waiting
	owner := b.box.Owner
	c.mu.Unlock()
	c.emit(fleet.Event{Box: name, Owner: owner, Kind: fleet.EventQuestion, State: fleet.Waiting, At: time.Now()})
}

func (c *scriptedCore) setFile(name, p string, data []byte) {
	c.mu.Lock()
	c.boxes[name].files[p] = data
	c.mu.Unlock()
}

func (c *scriptedCore) setDiff(name, patch string) {
	c.mu.Lock()
	c.boxes[name].diff = patch
	c.mu.Unlock()
}

func (c *scriptedCore) answered() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.answers)
}

func (c *scriptedCore) emit(e fleet.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch, who := range c.subs {
		if visible(who, e.Owner) {
			select {
			case ch <- e:
			default: // a slow subscriber loses events, like the core's
			}
		}
	}
}

func (c *scriptedCore) box(caller keys.Actor, name string) (*scriptedBox, error) {
	b := c.boxes[name]
	if b == nil || !visible(caller, b.box.Owner) {
		return nil, fmt.Errorf("box %q: %w", name, fleet.ErrNotFound)
	}
	return b, nil
}

func (c *scriptedCore) List(_ context.Context, caller keys.Actor) ([]fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fleet.Box
	for _, b := range c.boxes {
		if visible(caller, b.box.Owner) {
			out = append(out, b.box)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

func (c *scriptedCore) Get(_ context.Context, caller keys.Actor, name string) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	return b.box, nil
}

// scriptedLog follows a scripted box's log the way fleet.LogStream does:
// a runlog subscriber read from the file, cut at line ends, redacted by one
// streaming redact.Writer for the stream's life.
type scriptedLog struct {
	red    *redact.Redactor
	rd     *runlog.Reader
	limit  int64 // -1 with follow
	off    int64
	raw    []byte
	w      *redact.Writer
	out    bytes.Buffer
	closed bool
}

func (l *scriptedLog) Next(ctx context.Context) (fleet.Chunk, error) {
	for {
		if i := bytes.LastIndexByte(l.raw, '\n'); i >= 0 {
			l.out.Reset()
			_, _ = l.w.Write(l.raw[:i+1])
			l.off += int64(i + 1)
			l.raw = l.raw[i+1:]
			return fleet.Chunk{Text: l.red.Bytes(l.out.Bytes()), Offset: l.off}, nil
		}
		if l.closed || (l.limit >= 0 && l.off+int64(len(l.raw)) >= l.limit) {
			return fleet.Chunk{}, io.EOF
		}
		if err := ctx.Err(); err != nil {
			return fleet.Chunk{}, err
		}
		buf := make([]byte, 32<<10)
		n, err := l.rd.Read(buf)
		l.raw = append(l.raw, buf[:n]...)
		if err != nil {
			l.closed = true
		}
	}
}

func (l *scriptedLog) Close() error { return l.rd.Close() }

func (c *scriptedCore) Logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (logStream, error) {
	c.mu.Lock()
	b, err := c.box(caller, name)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	rd, err := b.log.Subscribe(ctx, from)
	if err != nil {
		return nil, err
	}
	l := &scriptedLog{red: c.red, rd: rd, limit: -1, off: from}
	if !follow {
		l.limit = b.log.Size()
	}
	l.w = c.red.NewWriter(&l.out)
	return l, nil
}

func (c *scriptedCore) Answer(_ context.Context, caller keys.Actor, name, text string) (fleet.AnswerResult, error) {
	c.mu.Lock()
	b, err := c.box(caller, name)
	if err != nil {
		c.mu.Unlock()
		return fleet.AnswerResult{}, err
	}
	if b.box.Question.Len() == 0 {
		c.mu.Unlock()
		return fleet.AnswerResult{}, fmt.Errorf("box %q has no pending question: %w", name, fleet.ErrConflict)
	}
	c.answers = append(c.answers, text)
	b.box.Question, b.box.State = redact.Safe{}, fleet.Running
	res := fleet.AnswerResult{Outcome: fleet.Answered, Box: b.box}
	c.mu.Unlock()
	c.emit(fleet.Event{Box: name, Owner: b.box.Owner, Kind: fleet.EventState, State: fleet.Running, At: time.Now()})
	return res, nil
}

func (c *scriptedCore) FollowUp(_ context.Context, caller keys.Actor, name, text string, force bool) (fleet.AnswerResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.AnswerResult{}, err
	}
	c.answers = append(c.answers, text)
	return fleet.AnswerResult{Outcome: fleet.Resumed, Box: b.box}, nil
}

func (c *scriptedCore) Inbox(_ context.Context, caller keys.Actor, name string) ([]fleet.InboxItem, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(b.inbox), nil
}

func (c *scriptedCore) RemoveInbox(_ context.Context, caller keys.Actor, name string, id int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return err
	}
	b.inbox = slices.DeleteFunc(b.inbox, func(it fleet.InboxItem) bool { return it.ID == id })
	return nil
}

func (c *scriptedCore) Diff(_ context.Context, caller keys.Actor, name string) (fleet.Diff, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Diff{}, err
	}
	if b.readErr != nil {
		return fleet.Diff{}, b.readErr
	}
	d := fleet.Diff{Patch: c.red.String(b.diff)}
	for line := range strings.SplitSeq(b.diff, "\n") {
		if p, ok := strings.CutPrefix(line, "+++ b/"); ok {
			d.Files = append(d.Files, fleet.FileStat{Path: c.red.String(p), Added: 1})
		}
	}
	return d, nil
}

// fail makes the box failed for reason, as the core records it.
func (c *scriptedCore) fail(name, reason string) {
	c.mu.Lock()
	b := c.boxes[name]
	b.box.State, b.box.Reason = fleet.Failed, c.red.String(reason)
	c.mu.Unlock()
}

// failReads makes the box's reads (diff, files) answer err.
func (c *scriptedCore) failReads(name string, err error) {
	c.mu.Lock()
	c.boxes[name].readErr = err
	c.mu.Unlock()
}

func (c *scriptedCore) setState(caller keys.Actor, name string, st fleet.State) (fleet.Box, error) {
	c.mu.Lock()
	b, err := c.box(caller, name)
	if err != nil {
		c.mu.Unlock()
		return fleet.Box{}, err
	}
	b.box.State = st
	box := b.box
	c.mu.Unlock()
	c.emit(fleet.Event{Box: name, Owner: box.Owner, Kind: fleet.EventState, State: st, At: time.Now()})
	return box, nil
}

func (c *scriptedCore) Sleep(_ context.Context, caller keys.Actor, name string) (fleet.Box, error) {
	return c.setState(caller, name, fleet.Sleeping)
}

func (c *scriptedCore) Wake(_ context.Context, caller keys.Actor, name string) (fleet.Box, error) {
	return c.setState(caller, name, fleet.Done)
}

func (c *scriptedCore) Keep(_ context.Context, caller keys.Actor, name string, keep bool) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	b.box.Keep = keep
	return b.box, nil
}

func (c *scriptedCore) Extend(_ context.Context, caller keys.Actor, name string, by time.Duration) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	b.box.Deadline = b.box.Deadline.Add(by)
	return b.box, nil
}

func (c *scriptedCore) Destroy(_ context.Context, caller keys.Actor, name string) error {
	c.mu.Lock()
	b, err := c.box(caller, name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	delete(c.boxes, name)
	c.mu.Unlock()
	_ = b.log.Close()
	c.emit(fleet.Event{Box: name, Owner: b.box.Owner, Kind: fleet.EventRemoved, At: time.Now()})
	return nil
}

func (c *scriptedCore) Events(ctx context.Context, caller keys.Actor) <-chan fleet.Event {
	ch := make(chan fleet.Event, 64)
	c.mu.Lock()
	c.subs[ch] = caller
	c.mu.Unlock()
	go func() {
		<-ctx.Done()
		c.mu.Lock()
		delete(c.subs, ch)
		c.mu.Unlock()
	}()
	return ch
}

func (c *scriptedCore) ReadDir(_ context.Context, caller keys.Actor, name, dir string) ([]fleet.FileInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return nil, err
	}
	if b.readErr != nil {
		return nil, b.readErr
	}
	dir = strings.Trim(path.Clean(dir), "/.")
	seen := map[string]bool{}
	var out []fleet.FileInfo
	for p, data := range b.files {
		rel := p
		if dir != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(p, dir+"/"); !ok {
				continue
			}
		}
		first, rest, isDir := strings.Cut(rel, "/")
		_ = rest
		if seen[first] {
			continue
		}
		seen[first] = true
		fi := fleet.FileInfo{Name: c.red.String(first), Size: int64(len(data)), Mode: 0o644}
		fi.Redacted = fi.Name.String() != first
		if isDir {
			fi.Mode, fi.Size = fs.ModeDir|0o755, 0
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name.String() < out[j].Name.String() })
	return out, nil
}

func (c *scriptedCore) Artifact(_ context.Context, caller keys.Actor, name, p string) (io.ReadCloser, fleet.FileInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return nil, fleet.FileInfo{}, err
	}
	data, ok := b.files[p]
	if !ok {
		return nil, fleet.FileInfo{}, fmt.Errorf("%s: %w", p, fleet.ErrNotFound)
	}
	return io.NopCloser(c.red.NewReader(bytes.NewReader(data))), fleet.FileInfo{Name: c.red.String(path.Base(p)), Size: int64(len(data))}, nil
}

func (c *scriptedCore) Delegate(_ context.Context, caller keys.Actor, req fleet.DelegateRequest) (fleet.Box, error) {
	if strings.TrimSpace(req.Task) == "" {
		return fleet.Box{}, fmt.Errorf("task is empty: %w", fleet.ErrInvalid)
	}
	c.mu.Lock()
	delegating := c.delegating
	c.mu.Unlock()
	if delegating != nil {
		if err := delegating(req); err != nil {
			return fleet.Box{}, c.red.Error(err)
		}
	}
	name := fmt.Sprintf("box-%d", time.Now().UnixNano()%1e6)
	repo := ""
	if len(req.Repos) > 0 {
		repo = req.Repos[0].Repo
	}
	c.add(name, caller.User, req.Task, repo, time.Now())
	return c.Get(context.Background(), caller, name)
}

func (c *scriptedCore) AddAccount(_ context.Context, caller keys.Actor, name, token, probe string) (accounts.Account, error) {
	return accounts.Account{}, fmt.Errorf("scripted core keeps no accounts: %w", fleet.ErrUnavailable)
}

func (c *scriptedCore) Accounts(context.Context, keys.Actor) ([]accounts.Account, error) {
	return nil, nil
}

func (c *scriptedCore) RemoveAccount(context.Context, keys.Actor, string) error {
	return fmt.Errorf("account: %w", fleet.ErrNotFound)
}

func (c *scriptedCore) MCPServers(context.Context, keys.Actor) ([]fleet.MCPServer, error) {
	return []fleet.MCPServer{{Name: "tools", URL: "https://mcp.example.com/mcp", Headers: []string{"Authorization"}}}, nil
}

func (c *scriptedCore) AddMCPServer(context.Context, keys.Actor, string, string, map[string]string) (fleet.MCPServer, error) {
	return fleet.MCPServer{}, fmt.Errorf("scripted core keeps no MCP servers: %w", fleet.ErrUnavailable)
}

func (c *scriptedCore) RemoveMCPServer(context.Context, keys.Actor, string) error {
	return fmt.Errorf("MCP server: %w", fleet.ErrNotFound)
}

func (c *scriptedCore) SetDefaultAccount(context.Context, keys.Actor, string) error {
	return fmt.Errorf("account: %w", fleet.ErrNotFound)
}

func (c *scriptedCore) OpenPR(context.Context, keys.Actor, string, fleet.PRRequest) (fleet.PR, error) {
	return fleet.PR{}, fmt.Errorf("scripted core opens no pull requests: %w", fleet.ErrUnavailable)
}

func (c *scriptedCore) MergePR(context.Context, keys.Actor, string, string, forge.MergeMethod) (fleet.PR, error) {
	return fleet.PR{}, fmt.Errorf("pull request: %w", fleet.ErrNotFound)
}

func (c *scriptedCore) ClosePR(context.Context, keys.Actor, string, string) (fleet.PR, error) {
	return fleet.PR{}, fmt.Errorf("pull request: %w", fleet.ErrNotFound)
}

var _ boxes = (*scriptedCore)(nil)

func (c *scriptedCore) SetTitle(_ context.Context, caller keys.Actor, name, title string) (fleet.Box, error) {
	c.mu.Lock()
	b, err := c.box(caller, name)
	if err != nil {
		c.mu.Unlock()
		return fleet.Box{}, err
	}
	if strings.TrimSpace(title) == "" {
		c.mu.Unlock()
		return fleet.Box{}, fmt.Errorf("empty title: %w", fleet.ErrInvalid)
	}
	b.box.Title = c.red.String(strings.TrimSpace(title))
	box := b.box
	c.mu.Unlock()
	c.emit(fleet.Event{Box: name, Owner: box.Owner, Kind: fleet.EventTitle, State: box.State, At: time.Now()})
	return box, nil
}

// AddRepo of the scripted core clones nothing: it lists the repo as the
// core would after the clone (the real one runs in TestAddRepoToRunningBox).
func (c *scriptedCore) AddRepo(_ context.Context, caller keys.Actor, name string, repo fleet.RepoSpec) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	for _, r := range b.box.Repos {
		if r.Name == repo.Repo {
			return fleet.Box{}, fmt.Errorf("box %q already has %s: %w", name, r.Name, fleet.ErrConflict)
		}
	}
	_, dir, _ := strings.Cut(repo.Repo, "/")
	b.box.Repos = append(b.box.Repos, fleet.Repo{Name: repo.Repo, Dir: dir, Ref: repo.Ref, Branch: "sbx/" + name, Push: true})
	return b.box, nil
}

// MentionedRepos is the core's rule over owner/name alone (the scripted
// core has no git host for URLs).
func (c *scriptedCore) MentionedRepos(task string, given []fleet.RepoSpec) []string {
	return fleet.ReposNamedIn(task, accounts.ParseRepo, given)
}

// Repos is what the scripted host's account reaches: the scripted repos,
// so the delegate form has something to offer.
func (c *scriptedCore) Repos(ctx context.Context, caller keys.Actor, account, query string) ([]forge.RepoInfo, error) {
	return []forge.RepoInfo{{Repo: forge.Repo{Owner: "acme", Name: "widget"}}, {Repo: forge.Repo{Owner: "acme", Name: "gadget"}}}, nil
}
