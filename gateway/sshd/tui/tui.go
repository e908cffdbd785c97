// Package tui is the fleet TUI of the SSH front: a table of the caller's
// boxes fed by the core's event fan-out (no polling of box state), sort and
// filter, a box view with the live redacted log tail, the pending question
// with an answer input, confirmed actions (sleep, wake, keep, destroy; the
// pull request's open, merge and close), prompts for the title, a repository
// to add, a side question and the allow-list, the inbox list, the diff and a
// delegate form, each through the core call its SSH command makes. Bubble Tea v2 renders it, Bubbles provides the text inputs
// (with the terminal's own cursor), key bindings and help; the SSH session is
// its terminal, whose TERM and NO_COLOR choose the colours.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/termtext"
	"sbx.dev/sbx/keys"
)

// Options is one TUI session.
type Options struct {
	Fleet  *fleet.Fleet
	Caller keys.Actor
	In     io.Reader
	// Out must map "\n" to "\r\n" like a terminal in cooked output mode
	// (the SSH library's emulated PTY does): the renderer assumes it.
	Out io.Writer
	// Env is the session's environment, TERM included (the PTY's): TERM
	// and NO_COLOR choose the colour profile (colorProfile).
	Env           []string
	Width, Height int
	// Windows delivers window changes; closed when the session ends.
	Windows <-chan Size
	Now     func() time.Time
	// StatsEvery is how often CPU and memory of running boxes are sampled
	// (the only thing not pushed by events); default 5 s.
	StatsEvery time.Duration
}

// Size is a terminal size in cells.
type Size struct{ Width, Height int }

// Run shows the TUI until the user quits or ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Fleet == nil {
		return errors.New("tui: no fleet")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.StatsEvery <= 0 {
		o.StatsEvery = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	profile := colorProfile(o.Env)
	m := newModel(ctx, o, profile == colorprofile.NoTTY)
	p := tea.NewProgram(m,
		tea.WithContext(ctx),
		tea.WithInput(o.In),
		tea.WithOutput(o.Out),
		tea.WithEnvironment(o.Env),
		tea.WithWindowSize(max(o.Width, 20), max(o.Height, 5)),
		tea.WithColorProfile(profile),
		tea.WithoutSignalHandler(),
		tea.WithoutCatchPanics(), // the SSH front's recover reports them
	)
	go func() {
		for {
			select {
			case w, ok := <-o.Windows:
				if !ok {
					return
				}
				p.Send(tea.WindowSizeMsg{Width: w.Width, Height: w.Height})
			case <-ctx.Done():
				return
			}
		}
	}()
	_, err := p.Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// colorProfile is what the session's terminal is sent: colorprofile's
// reading of the environment (TERM absent or dumb: plain text, no escape
// sequence styles anything) and NO_COLOR, which no-color.org has any
// non-empty value set (colorprofile takes only true/1): no colour, but
// bold and reverse stay, so the selection still shows.
func colorProfile(env []string) colorprofile.Profile {
	p := colorprofile.Env(env)
	noColor := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "NO_COLOR="); ok {
			noColor = v // the last one wins, as in a shell
		}
	}
	if noColor != "" && p > colorprofile.ASCII {
		p = colorprofile.ASCII
	}
	return p
}

// Messages.
type (
	boxesMsg struct {
		boxes []fleet.Box
		err   error
	}
	boxMsg struct {
		name string
		box  fleet.Box
		err  error
	}
	eventMsg   struct{ ev fleet.Event }
	eventsDone struct{}
	statsMsg   map[string]fleet.Stats
	logMsg     struct {
		gen  int
		text string
		err  error
	}
	doneMsg struct {
		what string
		err  error
	}
	clockTick struct{}
)

type mode int

const (
	modeTable mode = iota
	modeBox
	modeForm
	modeFilter
	modeConfirm
	modeAnswer
	modeHelp
	modePager
	modeAsk
	modeAllow
	modeTitle
	modeRepo
	modeInbox
)

// sort orders of the table.
var sortNames = []string{"newest", "name", "state", "output"}

type model struct {
	ctx    context.Context
	o      Options
	events <-chan fleet.Event

	w, h   int
	plain  bool // no styles reach the terminal: the selection is marked with ">"
	keys   keyMap
	help   help.Model
	mode   mode
	prev   mode // where confirm/answer/help return to
	boxes  map[string]fleet.Box
	stats  map[string]fleet.Stats
	order  []string // names shown, after sort and filter
	cursor int
	sortBy int
	filter string
	status string // one line of feedback (errors, results)

	// box view
	open    string
	logGen  int
	logStop context.CancelFunc
	logs    *fleet.LogStream
	logCtx  context.Context
	// skipPartial drops the first line of a tail that began mid-line.
	skipPartial bool
	lines       []string
	partial     string
	scroll      int // lines scrolled up from the end

	// prompts
	input     textinput.Model // the filter and answer prompts
	filterWas string          // the filter before / (esc restores it)
	confirm   struct {
		what string
		box  string
		item int64 // the inbox item of actRemoveInbox
	}
	form  form
	pager pagerState
	inbox inboxState
}

// maxLogLines bounds the box view's tail.
const maxLogLines = 2000

// tailBytes is how much of an existing log the box view starts with.
const tailBytes = 64 << 10

func newModel(ctx context.Context, o Options, plain bool) *model {
	m := &model{ctx: ctx, o: o, w: max(o.Width, 20), h: max(o.Height, 5), plain: plain,
		keys: newKeyMap(), help: newHelp(), input: newInput(),
		boxes: map[string]fleet.Box{}, stats: map[string]fleet.Stats{}}
	m.help.SetWidth(m.w)
	m.events = o.Fleet.Events(ctx, o.Caller)
	m.form = newForm(m.w)
	return m
}

func newHelp() help.Model {
	h := help.New()
	h.ShortSeparator = " · "
	keyStyle := lipgloss.NewStyle().Foreground(lipgloss.Color("7"))
	h.Styles = help.Styles{ShortKey: keyStyle, ShortDesc: stHelp, ShortSeparator: stHelp, Ellipsis: stHelp,
		FullKey: keyStyle, FullDesc: stHelp, FullSeparator: stHelp}
	return h
}

// newInput is a one-line text input drawn with the terminal's own cursor
// (View.Cursor), which moves with ←/→, home/end. Its prompt is set where
// it is drawn.
func newInput() textinput.Model {
	in := textinput.New()
	in.Prompt = ""
	in.SetVirtualCursor(false)
	in.SetStyles(textinput.Styles{Cursor: textinput.CursorStyle{Shape: tea.CursorBlock, Blink: true}})
	// ctrl+v would read the clipboard of the gateway's host, not the
	// user's; terminals paste with bracketed paste (tea.PasteMsg). Tab and
	// ↑/↓ belong to the form, and there are no suggestions.
	in.KeyMap.Paste.SetEnabled(false)
	in.KeyMap.AcceptSuggestion.SetEnabled(false)
	in.KeyMap.NextSuggestion.SetEnabled(false)
	in.KeyMap.PrevSuggestion.SetEnabled(false)
	in.Focus()
	return in
}

// typed drops from typed or pasted text what the terminal sanitizer would
// escape (controls, bidi overrides): an input holds only text that draws
// as itself, so the inputs need no sanitizing where they are drawn.
func typed(s string) string {
	if termtext.String(s) == s {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if c := string(r); termtext.String(c) == c {
			b.WriteString(c)
		}
	}
	return b.String()
}

// typedKey is k with its text passed through typed.
func typedKey(k tea.KeyPressMsg) tea.KeyPressMsg {
	k.Text = typed(k.Text)
	return k
}

func (m *model) Init() tea.Cmd {
	return tea.Batch(m.loadBoxes(), m.nextEvent(), m.sampleStats(), tickClock())
}

func tickClock() tea.Cmd {
	return tea.Tick(time.Second, func(time.Time) tea.Msg { return clockTick{} })
}

func (m *model) loadBoxes() tea.Cmd {
	return func() tea.Msg {
		b, err := m.o.Fleet.List(m.ctx, m.o.Caller)
		return boxesMsg{b, err}
	}
}

func (m *model) getBox(name string) tea.Cmd {
	return func() tea.Msg {
		b, err := m.o.Fleet.Get(m.ctx, m.o.Caller, name)
		return boxMsg{name, b, err}
	}
}

// nextEvent waits for one event of the core's fan-out.
func (m *model) nextEvent() tea.Cmd {
	ch := m.events
	return func() tea.Msg {
		ev, ok := <-ch
		if !ok {
			return eventsDone{}
		}
		return eventMsg{ev}
	}
}

func (m *model) sampleStats() tea.Cmd {
	var names []string
	for _, b := range m.boxes {
		switch b.State {
		case fleet.Running, fleet.Waiting, fleet.Done:
			names = append(names, b.Name)
		}
	}
	every := m.o.StatsEvery
	return func() tea.Msg {
		out := statsMsg{}
		for _, n := range names {
			if st, err := m.o.Fleet.Stats(m.ctx, m.o.Caller, n); err == nil {
				out[n] = st
			}
		}
		select {
		case <-m.ctx.Done():
		case <-time.After(every):
		}
		return out
	}
}

func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = max(msg.Width, 20), max(msg.Height, 5)
		m.help.SetWidth(m.w)
		m.form.setWidth(m.w)
		return m, nil
	case boxesMsg:
		if msg.err != nil {
			m.status = "error: " + msg.err.Error()
			return m, nil
		}
		m.boxes = map[string]fleet.Box{}
		for _, b := range msg.boxes {
			m.boxes[b.Name] = b
		}
		m.reorder()
		return m, nil
	case boxMsg:
		if errors.Is(msg.err, fleet.ErrNotFound) {
			delete(m.boxes, msg.name)
		} else if msg.err == nil {
			m.boxes[msg.name] = msg.box
		}
		m.reorder()
		return m, nil
	case eventMsg:
		return m, tea.Batch(m.applyEvent(msg.ev), m.nextEvent())
	case eventsDone:
		return m, nil
	case statsMsg:
		m.stats = msg
		return m, m.sampleStats()
	case clockTick:
		return m, tickClock() // ages move on
	case delegatedMsg:
		return m, m.delegated(msg)
	case stepMsg:
		return m, m.stepped(msg)
	case logOpened:
		if msg.gen != m.logGen {
			_ = msg.ls.Close()
			return m, nil
		}
		m.logs, m.logCtx, m.skipPartial = msg.ls, msg.ctx, msg.skipPartial
		return m, nextLog(m.logCtx, m.logGen, m.logs)
	case logMsg:
		return m, m.applyLog(msg)
	case diffMsg:
		m.applyDiff(msg)
		return m, nil
	case askMsg:
		m.applyAsk(msg)
		return m, nil
	case inboxMsg:
		m.applyInbox(msg)
		return m, nil
	case inboxRemoved:
		return m, m.inboxRemoved(msg)
	case doneMsg:
		if msg.err != nil {
			m.status = "error: " + oneLine(msg.err.Error())
		} else {
			m.status = msg.what
		}
		return m, nil
	case tea.KeyPressMsg:
		return m.key(msg)
	case tea.PasteMsg:
		msg.Content = typed(oneLine(msg.Content))
		var cmd tea.Cmd
		if m.prompting() {
			m.input, cmd = m.input.Update(msg)
			m.filterAsYouType()
		} else if m.mode == modeForm {
			cmd = m.form.update(msg)
		}
		return m, cmd
	}
	return m, nil
}

// applyEvent updates the table from one event: output only moves the
// last-output time; anything else re-reads the box.
func (m *model) applyEvent(ev fleet.Event) tea.Cmd {
	switch ev.Kind {
	case fleet.EventRemoved:
		delete(m.boxes, ev.Box)
		m.reorder()
		if m.open == ev.Box && m.mode == modeBox {
			m.status = "box " + ev.Box + " was destroyed"
		}
		if m.viewingInbox(ev.Box) {
			return m.loadInbox()
		}
		return nil
	case fleet.EventOutput:
		if b, ok := m.boxes[ev.Box]; ok {
			b.LastOutput = ev.At
			m.boxes[ev.Box] = b
			return nil
		}
	case fleet.EventState:
		if b, ok := m.boxes[ev.Box]; ok && ev.State != "" {
			b.State = ev.State // shown at once; the Get fills the rest
			m.boxes[ev.Box] = b
			m.reorder()
		}
	}
	if m.viewingInbox(ev.Box) { // a turn may have taken an item
		return tea.Batch(m.getBox(ev.Box), m.loadInbox())
	}
	return m.getBox(ev.Box)
}

func (m *model) reorder() {
	sel := m.selected()
	m.order = m.order[:0]
	for name, b := range m.boxes {
		if !fleet.MatchBox(b, m.filter) {
			continue
		}
		m.order = append(m.order, name)
	}
	slices.SortFunc(m.order, func(a, b string) int {
		x, y := m.boxes[a], m.boxes[b]
		switch sortNames[m.sortBy] {
		case "name":
			return strings.Compare(a, b)
		case "state":
			if c := strings.Compare(string(x.State), string(y.State)); c != 0 {
				return c
			}
		case "output":
			if c := y.LastOutput.Compare(x.LastOutput); c != 0 {
				return c
			}
		}
		if c := y.Created.Compare(x.Created); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	m.cursor = 0
	for i, n := range m.order {
		if n == sel {
			m.cursor = i
		}
	}
}

func (m *model) selected() string {
	if m.cursor >= 0 && m.cursor < len(m.order) {
		return m.order[m.cursor]
	}
	return ""
}

// target is the box an action applies to: the open one, or the selected.
func (m *model) target() string {
	if m.mode == modeBox || (m.prev == modeBox && m.mode != modeTable) {
		return m.open
	}
	return m.selected()
}

func (m *model) key(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	keys := m.keys
	if key.Matches(k, keys.ForceQuit) {
		return m, tea.Quit
	}
	switch m.mode {
	case modeHelp:
		m.mode = m.prev
		return m, nil
	case modeConfirm:
		m.mode = m.prev
		if key.Matches(k, keys.Confirm) {
			if m.confirm.what == actRemoveInbox {
				return m, m.removeInbox(m.confirm.box, m.confirm.item)
			}
			return m, m.act(m.confirm.what, m.confirm.box)
		}
		m.status = "cancelled"
		return m, nil
	case modeFilter, modeAnswer, modeAsk, modeAllow, modeTitle, modeRepo:
		return m.lineKey(k)
	case modeForm:
		return m.formKey(k)
	case modePager:
		return m.pagerKey(k)
	case modeInbox:
		return m.inboxKey(k)
	}
	switch {
	case key.Matches(k, keys.Quit):
		if m.mode == modeBox {
			m.closeBox()
			return m, nil
		}
		return m, tea.Quit
	case key.Matches(k, keys.Back):
		if m.mode == modeBox {
			m.closeBox()
		} else if m.filter != "" {
			m.filter = ""
			m.reorder()
		}
		return m, nil
	case key.Matches(k, keys.Help):
		m.prev, m.mode = m.mode, modeHelp
		return m, nil
	case key.Matches(k, keys.New):
		m.prev, m.mode = m.mode, modeForm
		if !m.form.busy {
			m.form = newForm(m.w)
		}
		return m, nil
	}
	name := m.target()
	if key.Matches(k, keys.Diff) {
		if name == "" {
			return m, nil
		}
		return m, m.openDiff(name)
	}
	if key.Matches(k, keys.Ask) || key.Matches(k, keys.Allow) {
		if name == "" {
			return m, nil
		}
		return m, m.startPrompt(k)
	}
	if key.Matches(k, keys.Title) || key.Matches(k, keys.AddRepo) {
		if name == "" {
			return m, nil
		}
		m.startEdit(k)
		return m, nil
	}
	if key.Matches(k, keys.Inbox) {
		if name == "" {
			return m, nil
		}
		return m, m.openInbox(name)
	}
	if what := m.action(k); what != "" {
		if name == "" {
			return m, nil
		}
		m.confirm.what, m.confirm.box = what, name
		m.prev, m.mode = m.mode, modeConfirm
		return m, nil
	}
	if key.Matches(k, keys.Answer) {
		if name == "" {
			return m, nil
		}
		m.prev, m.mode = m.mode, modeAnswer
		m.input.Reset()
		return m, nil
	}
	if m.mode == modeBox {
		switch {
		case key.Matches(k, keys.Up):
			m.scroll = min(m.scroll+1, max(len(m.lines)-1, 0))
		case key.Matches(k, keys.Down):
			m.scroll = max(m.scroll-1, 0)
		case key.Matches(k, keys.PageUp):
			m.scroll = min(m.scroll+m.logHeight(), max(len(m.lines)-1, 0))
		case key.Matches(k, keys.PageDown):
			m.scroll = max(m.scroll-m.logHeight(), 0)
		case key.Matches(k, keys.Follow):
			m.scroll = 0
		}
		return m, nil
	}
	switch {
	case key.Matches(k, keys.Up):
		m.cursor = max(m.cursor-1, 0)
	case key.Matches(k, keys.Down):
		m.cursor = min(m.cursor+1, max(len(m.order)-1, 0))
	case key.Matches(k, keys.Top):
		m.cursor = 0
	case key.Matches(k, keys.Bottom):
		m.cursor = max(len(m.order)-1, 0)
	case key.Matches(k, keys.Sort):
		m.sortBy = (m.sortBy + 1) % len(sortNames)
		m.reorder()
		m.status = "sorted by " + sortNames[m.sortBy]
	case key.Matches(k, keys.Filter):
		m.prev, m.mode, m.filterWas = m.mode, modeFilter, m.filter
		m.input.SetValue(m.filter)
		m.input.CursorEnd()
	case key.Matches(k, keys.Open):
		if name != "" {
			return m, m.openBox(name)
		}
	}
	return m, nil
}

// action is the confirmed action k asks for, or "".
func (m *model) action(k tea.KeyPressMsg) string {
	switch {
	case key.Matches(k, m.keys.Sleep):
		return "sleep"
	case key.Matches(k, m.keys.Wake):
		return "wake"
	case key.Matches(k, m.keys.Destroy):
		return "destroy"
	case key.Matches(k, m.keys.Keep):
		if m.boxes[m.target()].Keep {
			return "unkeep"
		}
		return "keep"
	case key.Matches(k, m.keys.PR):
		return actPR
	case key.Matches(k, m.keys.Merge):
		return actMerge
	case key.Matches(k, m.keys.ClosePR):
		return actClosePR
	}
	return ""
}

// lineKey edits the one-line input of the filter and answer prompts.
func (m *model) lineKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch {
	case key.Matches(k, m.keys.Cancel):
		if m.mode == modeFilter {
			m.filter = m.filterWas
			m.reorder()
		}
		m.mode = m.prev
		return m, nil
	case key.Matches(k, m.keys.Accept):
		was := m.mode
		m.mode = m.prev
		if was == modeFilter {
			m.filter = strings.TrimSpace(m.input.Value())
			m.reorder()
			return m, nil
		}
		if was == modeAsk || was == modeAllow {
			return m, m.acceptPrompt(was, m.target(), m.input.Value())
		}
		if was == modeTitle || was == modeRepo {
			return m, m.acceptEdit(was, m.target(), m.input.Value())
		}
		text := strings.TrimSpace(m.input.Value())
		if text == "" {
			m.status = "empty answer: nothing sent"
			return m, nil
		}
		return m, m.answer(m.target(), text)
	case key.Matches(k, m.keys.Clear):
		m.input.Reset()
	default:
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(typedKey(k))
		m.filterAsYouType()
		return m, cmd
	}
	m.filterAsYouType()
	return m, nil
}

// filterAsYouType applies the filter prompt's text while it is typed.
func (m *model) filterAsYouType() {
	if m.mode == modeFilter {
		m.filter = strings.TrimSpace(m.input.Value())
		m.reorder()
	}
}

func (m *model) act(what, name string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	m.status = what + " " + name + "…"
	if what == actMerge || what == actClosePR {
		return endPR(m, what, name)
	}
	return func() tea.Msg {
		var err error
		switch what {
		case "sleep":
			_, err = f.Sleep(ctx, caller, name)
		case "wake":
			_, err = f.Wake(ctx, caller, name)
		case "keep", "unkeep":
			_, err = f.Keep(ctx, caller, name, what == "keep")
		case "destroy":
			err = f.Destroy(ctx, caller, name)
		case actPR:
			p, err := f.OpenPR(ctx, caller, name, fleet.PRRequest{})
			verb := "opened"
			if !p.Opened {
				verb = "pushed; open already:"
			}
			return doneMsg{what: fmt.Sprintf("%s: %s %s#%d %s", name, verb, p.Repo, p.Number, p.URL), err: err}
		}
		return doneMsg{what: fmt.Sprintf("%s %s: done", what, name), err: err}
	}
}

// answer answers the question, or sends a follow-up when there is none.
func (m *model) answer(name, text string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	pending := m.boxes[name].Question.Len() > 0
	m.status = "sending…"
	return func() tea.Msg {
		var res fleet.AnswerResult
		var err error
		if pending {
			res, err = f.Answer(ctx, caller, name, text)
		} else {
			res, err = f.FollowUp(ctx, caller, name, text, false)
		}
		if err != nil {
			return doneMsg{err: err}
		}
		if res.Outcome == fleet.Queued {
			return doneMsg{what: fmt.Sprintf("queued in %s's inbox (item %d)", name, res.InboxID)}
		}
		return doneMsg{what: fmt.Sprintf("%s: %s", name, res.Outcome)}
	}
}

func (m *model) openBox(name string) tea.Cmd {
	m.closeBox()
	m.mode, m.open = modeBox, name
	m.lines, m.partial, m.scroll = nil, "", 0
	m.logGen++
	from := max(m.boxes[name].LogSize-tailBytes, 0)
	ctx, cancel := context.WithCancel(m.ctx)
	m.logStop = cancel
	gen := m.logGen
	f, caller := m.o.Fleet, m.o.Caller
	return func() tea.Msg {
		ls, err := f.Logs(ctx, caller, name, from, true)
		if err != nil {
			return logMsg{gen: gen, err: err}
		}
		return logOpened{gen: gen, ls: ls, ctx: ctx, skipPartial: from > 0}
	}
}

type logOpened struct {
	gen         int
	ls          *fleet.LogStream
	ctx         context.Context
	skipPartial bool
}

func (m *model) closeBox() {
	if m.logStop != nil {
		m.logStop()
		m.logStop = nil
	}
	if m.logs != nil {
		_ = m.logs.Close()
		m.logs = nil
	}
	m.mode, m.open = modeTable, ""
	m.logGen++
}

func nextLog(ctx context.Context, gen int, ls *fleet.LogStream) tea.Cmd {
	return func() tea.Msg {
		ch, err := ls.Next(ctx)
		if err != nil {
			return logMsg{gen: gen, err: err}
		}
		return logMsg{gen: gen, text: ch.Text.String()}
	}
}

func (m *model) applyLog(msg logMsg) tea.Cmd {
	if msg.gen != m.logGen {
		return nil
	}
	if msg.err != nil {
		if errors.Is(msg.err, io.EOF) {
			m.lines = append(m.lines, "── end of log ──")
		} else if m.ctx.Err() == nil {
			m.status = "log: " + oneLine(msg.err.Error())
		}
		return nil
	}
	text := m.partial + msg.text
	if m.skipPartial {
		_, rest, found := strings.Cut(text, "\n")
		if !found {
			return nextLog(m.logCtx, m.logGen, m.logs)
		}
		text, m.skipPartial = rest, false
	}
	parts := strings.Split(text, "\n")
	m.partial = parts[len(parts)-1]
	for _, l := range parts[:len(parts)-1] {
		m.lines = append(m.lines, safe(strings.TrimSuffix(l, "\r")))
	}
	if over := len(m.lines) - maxLogLines; over > 0 {
		m.lines = slices.Delete(m.lines, 0, over)
	}
	return nextLog(m.logCtx, m.logGen, m.logs)
}

// safe makes a string from outside the TUI (box text, names, errors, what
// the user typed or pasted) safe to draw on one line: the SSH front's one
// terminal sanitizer (escape sequences, controls and bidi overrides made
// visible, never passed on), then tabs as spaces. Every such string goes
// through it where the view draws it; the view's own styling is added after.
func safe(s string) string {
	return strings.ReplaceAll(termtext.String(s), "\t", "    ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// --- view ---

var (
	stTitle   = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	stHeader  = lipgloss.NewStyle().Bold(true).Underline(true)
	stSel     = lipgloss.NewStyle().Reverse(true)
	stHelp    = lipgloss.NewStyle().Foreground(lipgloss.Color("8"))
	stStatus  = lipgloss.NewStyle().Foreground(lipgloss.Color("11"))
	stBanner  = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("0")).Background(lipgloss.Color("11"))
	stConfirm = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("15")).Background(lipgloss.Color("1"))
	stState   = map[fleet.State]lipgloss.Style{
		fleet.Running:  lipgloss.NewStyle().Foreground(lipgloss.Color("10")),
		fleet.Waiting:  lipgloss.NewStyle().Foreground(lipgloss.Color("11")).Bold(true),
		fleet.Done:     lipgloss.NewStyle().Foreground(lipgloss.Color("14")),
		fleet.Sleeping: lipgloss.NewStyle().Foreground(lipgloss.Color("8")),
		fleet.Failed:   lipgloss.NewStyle().Foreground(lipgloss.Color("9")),
		fleet.Creating: lipgloss.NewStyle().Foreground(lipgloss.Color("13")),
	}
)

func (m *model) View() tea.View {
	var body string
	switch {
	case m.mode == modeHelp:
		body = m.helpView()
	case m.mode == modeForm:
		body = m.form.view()
	case m.mode == modePager:
		body = m.pagerView()
	case m.mode == modeInbox || (m.mode == modeConfirm && m.prev == modeInbox):
		body = m.inboxView()
	case m.mode == modeBox || (m.open != "" && (m.mode == modeConfirm || m.prompting()) && m.prev == modeBox):
		body = m.boxView()
	default:
		body = m.tableView()
	}
	lines := strings.Split(body, "\n")
	// The bottom two lines: status or prompt, then the help bar.
	height := m.h - 2
	if len(lines) > height {
		lines = lines[:height]
	}
	for len(lines) < height {
		lines = append(lines, "")
	}
	lines = append(lines, m.promptLine(), m.helpBar())
	for i, l := range lines {
		lines[i] = truncate(l, m.w)
	}
	v := tea.NewView(strings.Join(lines, "\n"))
	v.AltScreen = true
	v.Cursor = m.textCursor(height)
	return v
}

// textCursor is where the terminal's cursor shows while text is typed (the
// prompt line, or the form's focused field), nil to hide it.
func (m *model) textCursor(bodyHeight int) *tea.Cursor {
	var c *tea.Cursor
	switch m.mode {
	case modeFilter, modeAnswer, modeAsk, modeAllow, modeTitle, modeRepo:
		in := m.promptInput()
		if c = in.Cursor(); c != nil {
			c.Y = bodyHeight // the prompt line, below the body
		}
	case modeForm:
		c = m.form.cursor(bodyHeight)
	}
	if c == nil || c.X >= m.w {
		return nil
	}
	return c
}

// promptInput is the prompt line's input with its prompt, fitted to the
// terminal's width (the input scrolls sideways past it).
func (m *model) promptInput() textinput.Model {
	in := m.input
	switch m.mode {
	case modeFilter:
		in.Prompt = "filter: "
	case modeAsk:
		in.Prompt = "side question to " + safe(m.target()) + ": "
	case modeAllow:
		in.Prompt = "allow-list of " + safe(m.target()) + ": "
	case modeTitle:
		in.Prompt = "title of " + safe(m.target()) + ": "
	case modeRepo:
		in.Prompt = "add to " + safe(m.target()) + " (owner/name[@ref]): "
	default:
		verb := "follow-up to "
		if m.boxes[m.target()].Question.Len() > 0 {
			verb = "answer to "
		}
		in.Prompt = verb + safe(m.target()) + ": "
	}
	in.SetWidth(max(m.w-lipgloss.Width(in.Prompt)-1, 1))
	return in
}

func (m *model) promptLine() string {
	switch m.mode {
	case modeConfirm:
		if m.confirm.what == actRemoveInbox {
			return stConfirm.Render(fmt.Sprintf(" remove inbox item %d of %s? y/N ", m.confirm.item, safe(m.confirm.box)))
		}
		return stConfirm.Render(fmt.Sprintf(" %s %s? y/N ", m.confirm.what, safe(m.confirm.box)))
	case modeFilter, modeAnswer, modeAsk, modeAllow, modeTitle, modeRepo:
		in := m.promptInput()
		return in.View()
	}
	return stStatus.Render(safe(oneLine(m.status)))
}

// helpBar is the mode's keys, cut with "…" where the terminal is narrow.
func (m *model) helpBar() string {
	var b bindings
	switch m.mode {
	case modeBox:
		b = m.keys.boxHelp()
	case modeForm:
		b = m.keys.formHelp()
	case modeFilter, modeAnswer, modeAsk, modeAllow, modeTitle, modeRepo:
		b = m.keys.promptHelp()
	case modeConfirm:
		b = m.keys.confirmHelp()
	case modePager:
		b = m.keys.pagerHelp()
	case modeInbox:
		b = m.keys.inboxHelp()
	case modeHelp:
		return stHelp.Render("any key: back")
	default:
		b = m.keys.tableHelp()
	}
	return m.help.ShortHelpView(b.ShortHelp())
}

func (m *model) helpView() string {
	return stTitle.Render("sbx fleet — keys") + "\n\nTable\n" +
		m.help.FullHelpView(m.keys.tableHelp().FullHelp()) + "\n\nBox view\n" +
		m.help.FullHelpView(m.keys.boxHelp().FullHelp()) + "\n\nDiff view, side answers\n" +
		m.help.FullHelpView(m.keys.pagerHelp().FullHelp()) + "\n\nInbox\n" +
		m.help.FullHelpView(m.keys.inboxHelp().FullHelp()) + "\n\n" +
		"Actions ask for confirmation (y). Everything shown is redacted by the core."
}

func (m *model) tableView() string {
	now := m.o.Now()
	var b strings.Builder
	title := fmt.Sprintf("sbx fleet — %s (%s) — %d box(es), sorted by %s", safe(m.o.Caller.User), m.o.Caller.Role, len(m.boxes), sortNames[m.sortBy])
	if m.filter != "" {
		title += fmt.Sprintf(", filter \"%s\": %d shown", safe(m.filter), len(m.order))
	}
	b.WriteString(stTitle.Render(title) + "\n")
	cols := []struct {
		name string
		w    int
	}{{"NAME", m.nameWidth()}, {"OWNER", 10}, {"STATE", 9}, {"AGENT", 7}, {"UP", 5}, {"CPU", 5}, {"MEM", 6}, {"OUT", 5}, {"?", 1}}
	// The title takes what room is left on the line, when there is some.
	used := len(cols) - 1
	for _, c := range cols {
		used += c.w
	}
	if m.plain {
		used += 2
	}
	if tw := m.w - used - 1; tw >= 8 {
		cols = append(cols, struct {
			name string
			w    int
		}{"TITLE", tw})
	}
	row := func(vals []string) string {
		var parts []string
		for i, c := range cols {
			parts = append(parts, pad(safe(vals[i]), c.w))
		}
		return strings.Join(parts, " ")
	}
	// Plain output cannot show the selection in reverse: a marker column.
	mark := func(selected bool) string {
		switch {
		case !m.plain:
			return ""
		case selected:
			return "> "
		}
		return "  "
	}
	var head []string
	for _, c := range cols {
		head = append(head, c.name)
	}
	b.WriteString(mark(false) + stHeader.Render(row(head)) + "\n")
	if len(m.order) == 0 {
		if len(m.boxes) == 0 {
			b.WriteString("\n  no boxes yet — press n to delegate a task\n")
		} else {
			b.WriteString("\n  no box matches the filter (esc clears it)\n")
		}
		return b.String()
	}
	rows := m.h - 4
	start := 0
	if m.cursor >= rows {
		start = m.cursor - rows + 1
	}
	for i := start; i < len(m.order) && i < start+rows; i++ {
		bx := m.boxes[m.order[i]]
		cpu, mem := "-", "-"
		if st, ok := m.stats[bx.Name]; ok {
			cpu = fmt.Sprintf("%.0f%%", st.CPUPercent)
			mem = bytesShort(st.PrivateBytes)
		}
		q := ""
		if bx.Question.Len() > 0 {
			q = "?"
		}
		line := row([]string{bx.Name, bx.Owner, string(bx.State), bx.Agent, Age(now, bx.Created), cpu, mem, Age(now, bx.LastOutput), q, oneLine(bx.Title.String())})
		if i == m.cursor {
			line = stSel.Render(line)
		} else if st, ok := stState[bx.State]; ok {
			line = st.Render(line)
		}
		b.WriteString(mark(i == m.cursor) + line + "\n")
	}
	return b.String()
}

// nameWidth fits the longest name shown, within reason.
func (m *model) nameWidth() int {
	w := 8
	for _, n := range m.order {
		w = max(w, len(n))
	}
	room := m.w - 56
	if m.plain {
		room -= 2 // the selection marker
	}
	return min(w, max(room, 12))
}

func (m *model) logHeight() int {
	extra := 0
	if len(m.boxes[m.open].PRs) > 0 {
		extra = 1 // the pull request's line
	}
	return max(m.h-8-extra, 1)
}

// actPR is the confirmed action of P: push the box's branch and open (or
// update) its pull request.
const actPR = "push and open a pull request for"

// prLine is the box's newest pull request on one line.
func prLine(p fleet.PR) string {
	state := p.State
	if p.Draft && state == "open" {
		state = "draft"
	}
	checks := p.ChecksOutcome
	if checks == "" {
		checks = "none"
	}
	sha := p.HeadSHA
	if len(sha) > 12 {
		sha = sha[:12]
	}
	line := fmt.Sprintf("pr: %s#%d %s · head %s · checks %s · review %s", p.Repo, p.Number, state, sha, checks, strings.ReplaceAll(p.Review, "_", " "))
	if p.State == "open" {
		line += " · mergeable " + p.Mergeable
	}
	return line + " · " + p.URL
}

func (m *model) boxView() string {
	now := m.o.Now()
	bx, ok := m.boxes[m.open]
	var b strings.Builder
	if !ok {
		b.WriteString(stTitle.Render("box "+safe(m.open)+" (gone)") + "\n")
	} else {
		state := string(bx.State)
		if st, ok := stState[bx.State]; ok {
			state = st.Render(state)
		}
		kept := ""
		if bx.Keep {
			kept = " · kept"
		}
		b.WriteString(stTitle.Render("box "+safe(bx.Name)) + " · " + state + " · " + safe(bx.Agent) + " · " + safe(bx.Owner) +
			" · up " + Age(now, bx.Created) + " · output " + Age(now, bx.LastOutput) + kept + "\n")
		line := "title: " + safe(oneLine(bx.Title.String()))
		if t := oneLine(bx.Task.String()); t != oneLine(bx.Title.String()) {
			line += " · task: " + safe(t)
		}
		b.WriteString(truncate(line, max(m.w, 20)) + "\n")
		if len(bx.PRs) > 0 {
			b.WriteString(safe(prLine(bx.PRs[0])) + "\n")
		}
	}
	if ok && bx.Question.Len() > 0 {
		b.WriteString(stBanner.Render(" ? "+safe(oneLine(bx.Question.String()))+" ") + "  (a to answer)\n")
	} else {
		b.WriteString("\n")
	}
	b.WriteString(stHeader.Render(pad("log", m.w)) + "\n")
	n := m.logHeight()
	end := len(m.lines) - m.scroll
	start := max(end-n, 0)
	for _, l := range m.lines[start:max(end, 0)] {
		b.WriteString(l + "\n")
	}
	if m.scroll > 0 {
		b.WriteString(stHelp.Render(fmt.Sprintf("── %d line(s) below (End follows) ──", m.scroll)) + "\n")
	}
	return b.String()
}

func pad(s string, w int) string {
	s = truncate(s, w)
	if n := lipgloss.Width(s); n < w {
		s += strings.Repeat(" ", w-n)
	}
	return s
}

// truncate cuts s to w cells, keeping styles intact.
func truncate(s string, w int) string {
	if lipgloss.Width(s) <= w {
		return s
	}
	return lipgloss.NewStyle().MaxWidth(w).Render(s)
}

func bytesShort(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Age is how long ago t was, for people: "12s", "5m", "3h", "2d", or "in
// 5m" for a time ahead; "-" for never. The SSH commands share it.
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s
}
