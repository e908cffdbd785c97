package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"sbx.dev/sbx/fleet"
)

// The diff view: the selected (or open) box's change against each repo's
// base commit, as `ssh … diff` prints it — the changed files with their
// counts, then the patch — scrollable. Every line from the box passes
// safe() (the terminal sanitizer) before any style is added. Like every
// read it never wakes a box: a sleeping one says so.

// maxDiffLines bounds what the view keeps of a patch; `ssh … diff BOX`
// prints the rest.
const maxDiffLines = 20000

type diffMsg struct {
	gen  int
	box  string
	diff fleet.Diff
	err  error
}

// diffState is the diff view's.
type diffState struct {
	box     string
	from    mode // where esc returns
	gen     int
	loading bool
	lines   []string // sanitized, unstyled
	err     string
	top     int // the first line shown
}

var (
	stAdd  = lipgloss.NewStyle().Foreground(lipgloss.Color("10"))
	stDel  = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	stHunk = lipgloss.NewStyle().Foreground(lipgloss.Color("14"))
)

// openDiff shows box name's diff, loading it from the core.
func (m *model) openDiff(name string) tea.Cmd {
	m.diff.gen++
	m.diff = diffState{box: name, from: m.mode, gen: m.diff.gen, loading: true}
	m.mode = modeDiff
	f, ctx, caller, gen := m.o.Fleet, m.ctx, m.o.Caller, m.diff.gen
	return func() tea.Msg {
		d, err := f.Diff(ctx, caller, name)
		return diffMsg{gen: gen, box: name, diff: d, err: err}
	}
}

func (m *model) applyDiff(msg diffMsg) {
	if msg.gen != m.diff.gen || msg.box != m.diff.box {
		return // a view left or replaced meanwhile
	}
	m.diff.loading = false
	if msg.err != nil {
		m.diff.err = oneLine(msg.err.Error())
		return
	}
	m.diff.lines = diffLines(msg.diff)
}

// diffLines is d as the view shows it: a summary, a line per changed
// file, then the patch, every line sanitized for the terminal.
func diffLines(d fleet.Diff) []string {
	if len(d.Files) == 0 {
		return []string{"no changes yet"}
	}
	added, deleted := 0, 0
	for _, f := range d.Files {
		added += f.Added
		deleted += f.Deleted
	}
	out := []string{fmt.Sprintf("%d file(s) changed, +%d −%d", len(d.Files), added, deleted)}
	for _, f := range d.Files {
		if f.Binary {
			out = append(out, "  "+safe(f.Path.String())+"  binary")
		} else {
			out = append(out, fmt.Sprintf("  %s  +%d −%d", safe(f.Path.String()), f.Added, f.Deleted))
		}
	}
	out = append(out, "")
	patch := strings.Split(strings.TrimSuffix(d.Patch.String(), "\n"), "\n")
	for i, l := range patch {
		if len(out) >= maxDiffLines {
			out = append(out, fmt.Sprintf("── cut: %d more line(s); ssh … diff BOX prints them all ──", len(patch)-i))
			break
		}
		out = append(out, safe(strings.TrimSuffix(l, "\r")))
	}
	return out
}

func (m *model) diffHeight() int { return max(m.h-4, 1) }

// diffKey scrolls the diff view or leaves it.
func (m *model) diffKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	keys, last := m.keys, max(len(m.diff.lines)-m.diffHeight(), 0)
	switch {
	case key.Matches(k, keys.Back), key.Matches(k, keys.Quit), key.Matches(k, keys.Diff):
		m.mode = m.diff.from
		m.diff.gen++ // a load still under way is dropped
	case key.Matches(k, keys.Help):
		m.prev, m.mode = modeDiff, modeHelp
	case key.Matches(k, keys.Up):
		m.diff.top = max(m.diff.top-1, 0)
	case key.Matches(k, keys.Down):
		m.diff.top = min(m.diff.top+1, last)
	case key.Matches(k, keys.PageUp):
		m.diff.top = max(m.diff.top-m.diffHeight(), 0)
	case key.Matches(k, keys.PageDown), key.Matches(k, keys.Toggle):
		m.diff.top = min(m.diff.top+m.diffHeight(), last)
	case key.Matches(k, keys.Top):
		m.diff.top = 0
	case key.Matches(k, keys.Bottom):
		m.diff.top = last
	}
	return m, nil
}

func (m *model) diffView() string {
	var b strings.Builder
	b.WriteString(stTitle.Render("diff of box "+safe(m.diff.box)) + "\n")
	switch {
	case m.diff.loading:
		b.WriteString("\n  computing the diff in the box…\n")
		return b.String()
	case m.diff.err != "":
		b.WriteString("\n  " + stDel.Render("error: "+safe(m.diff.err)) + "\n")
		return b.String()
	}
	n := m.diffHeight()
	end := min(m.diff.top+n, len(m.diff.lines))
	for _, l := range m.diff.lines[m.diff.top:end] {
		b.WriteString(m.styleDiffLine(l) + "\n")
	}
	if end < len(m.diff.lines) {
		b.WriteString(stHelp.Render(fmt.Sprintf("── lines %d–%d of %d (pgdn/space for more) ──", m.diff.top+1, end, len(m.diff.lines))) + "\n")
	}
	return b.String()
}

// styleDiffLine colours a sanitized patch line: the escapes it adds are
// the TUI's own.
func (m *model) styleDiffLine(l string) string {
	switch {
	case m.plain:
		return l
	case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
		return stHeader.Render(l)
	case strings.HasPrefix(l, "+"):
		return stAdd.Render(l)
	case strings.HasPrefix(l, "-"):
		return stDel.Render(l)
	case strings.HasPrefix(l, "@@"):
		return stHunk.Render(l)
	}
	return l
}
