// Package tui is the fleet TUI of the SSH front: a table of the caller's
// boxes fed by the core's event fan-out (no polling of box state), sort and
// filter, a box view with the live redacted log tail, the pending question
// with an answer input, confirmed actions (sleep, wake, keep, destroy) and a
// delegate form. Bubble Tea v2 renders it; the SSH session is its terminal.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

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
	Out           io.Writer
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
	m := newModel(ctx, o)
	profile := colorprofile.ANSI
	for _, kv := range o.Env {
		if strings.HasPrefix(kv, "TERM=") && strings.Contains(kv, "256color") {
			profile = colorprofile.ANSI256
		}
	}
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
)

// sort orders of the table.
var sortNames = []string{"newest", "name", "state", "output"}

type model struct {
	ctx    context.Context
	o      Options
	events <-chan fleet.Event

	w, h   int
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
	input   string
	confirm struct {
		what string
		box  string
	}
	form form
}

// maxLogLines bounds the box view's tail.
const maxLogLines = 2000

// tailBytes is how much of an existing log the box view starts with.
const tailBytes = 64 << 10

func newModel(ctx context.Context, o Options) *model {
	m := &model{ctx: ctx, o: o, w: max(o.Width, 20), h: max(o.Height, 5),
		boxes: map[string]fleet.Box{}, stats: map[string]fleet.Stats{}}
	m.events = o.Fleet.Events(ctx, o.Caller)
	m.form = newForm()
	return m
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
	case logOpened:
		if msg.gen != m.logGen {
			_ = msg.ls.Close()
			return m, nil
		}
		m.logs, m.logCtx, m.skipPartial = msg.ls, msg.ctx, msg.skipPartial
		return m, nextLog(m.logCtx, m.logGen, m.logs)
	case logMsg:
		return m, m.applyLog(msg)
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
		if m.mode == modeAnswer || m.mode == modeFilter {
			m.input += oneLine(msg.Content)
		} else if m.mode == modeForm {
			m.form.paste(oneLine(msg.Content))
		}
		return m, nil
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
	return m.getBox(ev.Box)
}

func (m *model) reorder() {
	sel := m.selected()
	m.order = m.order[:0]
	f := strings.ToLower(m.filter)
	for name, b := range m.boxes {
		if f != "" && !strings.Contains(strings.ToLower(name+" "+b.Owner+" "+string(b.State)+" "+b.Agent+" "+b.Task.String()), f) {
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
	s := k.String()
	if s == "ctrl+c" {
		return m, tea.Quit
	}
	switch m.mode {
	case modeHelp:
		m.mode = m.prev
		return m, nil
	case modeConfirm:
		m.mode = m.prev
		if s == "y" || s == "Y" {
			return m, m.act(m.confirm.what, m.confirm.box)
		}
		m.status = "cancelled"
		return m, nil
	case modeFilter, modeAnswer:
		return m.lineKey(k)
	case modeForm:
		return m.formKey(k)
	}
	switch s {
	case "q":
		if m.mode == modeBox {
			m.closeBox()
			return m, nil
		}
		return m, tea.Quit
	case "esc":
		if m.mode == modeBox {
			m.closeBox()
		} else if m.filter != "" {
			m.filter = ""
			m.reorder()
		}
		return m, nil
	case "?":
		m.prev, m.mode = m.mode, modeHelp
		return m, nil
	case "n":
		m.prev, m.mode = m.mode, modeForm
		if !m.form.busy {
			m.form = newForm()
		}
		return m, nil
	}
	name := m.target()
	switch s {
	case "z", "w", "d", "k":
		if name == "" {
			return m, nil
		}
		what := map[string]string{"z": "sleep", "w": "wake", "d": "destroy", "k": "keep"}[s]
		if what == "keep" && m.boxes[name].Keep {
			what = "unkeep"
		}
		m.confirm.what, m.confirm.box = what, name
		m.prev, m.mode = m.mode, modeConfirm
		return m, nil
	case "a":
		if name == "" {
			return m, nil
		}
		m.prev, m.mode, m.input = m.mode, modeAnswer, ""
		return m, nil
	}
	if m.mode == modeBox {
		switch s {
		case "up", "k":
			m.scroll = min(m.scroll+1, max(len(m.lines)-1, 0))
		case "down", "j":
			m.scroll = max(m.scroll-1, 0)
		case "pgup":
			m.scroll = min(m.scroll+m.logHeight(), max(len(m.lines)-1, 0))
		case "pgdown":
			m.scroll = max(m.scroll-m.logHeight(), 0)
		case "end", "G":
			m.scroll = 0
		}
		return m, nil
	}
	switch s {
	case "up", "k":
		m.cursor = max(m.cursor-1, 0)
	case "down", "j":
		m.cursor = min(m.cursor+1, max(len(m.order)-1, 0))
	case "home", "g":
		m.cursor = 0
	case "end", "G":
		m.cursor = max(len(m.order)-1, 0)
	case "s":
		m.sortBy = (m.sortBy + 1) % len(sortNames)
		m.reorder()
		m.status = "sorted by " + sortNames[m.sortBy]
	case "/":
		m.prev, m.mode, m.input = m.mode, modeFilter, m.filter
	case "enter":
		if name != "" {
			return m, m.openBox(name)
		}
	}
	return m, nil
}

// lineKey edits the one-line input of the filter and answer prompts.
func (m *model) lineKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	switch k.String() {
	case "esc":
		m.mode = m.prev
		if m.mode == modeTable && m.prev == modeFilter {
			m.mode = modeTable
		}
		return m, nil
	case "enter":
		was := m.mode
		m.mode = m.prev
		if was == modeFilter {
			m.filter = strings.TrimSpace(m.input)
			m.reorder()
			return m, nil
		}
		text := strings.TrimSpace(m.input)
		if text == "" {
			m.status = "empty answer: nothing sent"
			return m, nil
		}
		return m, m.answer(m.target(), text)
	case "backspace":
		if r := []rune(m.input); len(r) > 0 {
			m.input = string(r[:len(r)-1])
		}
	case "ctrl+u":
		m.input = ""
	default:
		if k.Text != "" {
			m.input += k.Text
		}
	}
	if m.mode == modeFilter { // filter as you type
		m.filter = strings.TrimSpace(m.input)
		m.reorder()
	}
	return m, nil
}

func (m *model) act(what, name string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	m.status = what + " " + name + "…"
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
	case m.mode == modeBox || (m.open != "" && (m.mode == modeConfirm || m.mode == modeAnswer) && m.prev == modeBox):
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
	return v
}

func (m *model) promptLine() string {
	switch m.mode {
	case modeConfirm:
		return stConfirm.Render(fmt.Sprintf(" %s %s? y/N ", m.confirm.what, safe(m.confirm.box)))
	case modeFilter:
		return "filter: " + safe(m.input) + "█"
	case modeAnswer:
		verb := "follow-up to "
		if m.boxes[m.target()].Question.Len() > 0 {
			verb = "answer to "
		}
		return verb + safe(m.target()) + ": " + safe(m.input) + "█"
	}
	return stStatus.Render(safe(oneLine(m.status)))
}

func (m *model) helpBar() string {
	var h string
	switch m.mode {
	case modeBox:
		h = "esc back · a answer · z sleep · w wake · k keep · d destroy · ↑↓ scroll · ? help · ctrl+c quit"
		if m.w < lipgloss.Width(h) {
			h = "esc back · a answer · z/w sleep/wake · k keep · d destroy · ↑↓ scroll · ?"
		}
	case modeForm:
		h = "tab/↑↓ field · space toggle · enter next/submit · ctrl+s submit · esc cancel"
	case modeFilter, modeAnswer:
		h = "enter done · esc cancel · ctrl+u clear"
	case modeConfirm:
		h = "y confirm · any other key cancels"
	case modeHelp:
		h = "any key: back"
	default:
		h = "↑↓ move · ⏎ open · n new · a answer · z sleep · w wake · k keep · d destroy · s sort · / filter · ? help · q quit"
		if m.w < lipgloss.Width(h) {
			h = "↑↓ ⏎ open · n new · a answer · z/w sleep/wake · k keep · d destroy · s · / · ? · q"
		}
	}
	return stHelp.Render(h)
}

func (m *model) helpView() string {
	return stTitle.Render("sbx fleet — keys") + `

Table
  ↑/↓ j/k   move              enter   open the box (live log)
  n         delegate a task    /       filter (name, owner, state, task)
  s         cycle sort: newest, name, state, last output
  a         answer the question (or send a follow-up)
  z / w     sleep / wake       k       keep / unkeep
  d         destroy            q       quit

Box view
  ↑/↓ PgUp/PgDn  scroll the log; End follows again
  esc / q        back to the table

Actions ask for confirmation (y). Everything shown is redacted by the core.`
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
	row := func(vals []string) string {
		var parts []string
		for i, c := range cols {
			parts = append(parts, pad(safe(vals[i]), c.w))
		}
		return strings.Join(parts, " ")
	}
	var head []string
	for _, c := range cols {
		head = append(head, c.name)
	}
	b.WriteString(stHeader.Render(row(head)) + "\n")
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
		line := row([]string{bx.Name, bx.Owner, string(bx.State), bx.Agent, Age(now, bx.Created), cpu, mem, Age(now, bx.LastOutput), q})
		if i == m.cursor {
			line = stSel.Render(line)
		} else if st, ok := stState[bx.State]; ok {
			line = st.Render(line)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// nameWidth fits the longest name shown, within reason.
func (m *model) nameWidth() int {
	w := 8
	for _, n := range m.order {
		w = max(w, len(n))
	}
	return min(w, max(m.w-56, 12))
}

func (m *model) logHeight() int { return max(m.h-8, 1) }

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
		b.WriteString("task: " + safe(oneLine(bx.Task.String())) + "\n")
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
