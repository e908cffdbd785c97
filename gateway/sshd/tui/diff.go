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

// pagerState is a view of lines from a box (its diff, a side answer)
// that scrolls like a pager.
type pagerState struct {
	title   string // already safe
	box     string
	diff    bool // colour the lines as a patch
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
	m.pager.gen++
	m.pager = pagerState{title: "diff of box " + safe(name), box: name, diff: true, from: m.mode, gen: m.pager.gen, loading: true}
	m.mode = modePager
	f, ctx, caller, gen := m.o.Fleet, m.ctx, m.o.Caller, m.pager.gen
	return func() tea.Msg {
		d, err := f.Diff(ctx, caller, name)
		return diffMsg{gen: gen, box: name, diff: d, err: err}
	}
}

func (m *model) applyDiff(msg diffMsg) {
	if msg.gen != m.pager.gen || msg.box != m.pager.box {
		return // a view left or replaced meanwhile
	}
	m.pager.loading = false
	if msg.err != nil {
		m.pager.err = oneLine(msg.err.Error())
		return
	}
	m.pager.lines = diffLines(msg.diff)
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

func (m *model) pagerHeight() int { return max(m.h-4, 1) }

// pagerKey scrolls the pager or leaves it.
func (m *model) pagerKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	keys, last := m.keys, max(len(m.pager.lines)-m.pagerHeight(), 0)
	switch {
	case key.Matches(k, keys.Back), key.Matches(k, keys.Quit), key.Matches(k, keys.Diff):
		m.mode = m.pager.from
		m.pager.gen++ // a load still under way is dropped
	case key.Matches(k, keys.Help):
		m.prev, m.mode = modePager, modeHelp
	case key.Matches(k, keys.Up):
		m.pager.top = max(m.pager.top-1, 0)
	case key.Matches(k, keys.Down):
		m.pager.top = min(m.pager.top+1, last)
	case key.Matches(k, keys.PageUp):
		m.pager.top = max(m.pager.top-m.pagerHeight(), 0)
	case key.Matches(k, keys.PageDown), key.Matches(k, keys.Toggle):
		m.pager.top = min(m.pager.top+m.pagerHeight(), last)
	case key.Matches(k, keys.Top):
		m.pager.top = 0
	case key.Matches(k, keys.Bottom):
		m.pager.top = last
	}
	return m, nil
}

func (m *model) pagerView() string {
	var b strings.Builder
	b.WriteString(stTitle.Render(m.pager.title) + "\n")
	switch {
	case m.pager.loading:
		b.WriteString("\n  computing the diff in the box…\n")
		return b.String()
	case m.pager.err != "":
		b.WriteString("\n  " + stDel.Render("error: "+safe(m.pager.err)) + "\n")
		return b.String()
	}
	n := m.pagerHeight()
	end := min(m.pager.top+n, len(m.pager.lines))
	for _, l := range m.pager.lines[m.pager.top:end] {
		b.WriteString(m.styleDiffLine(l) + "\n")
	}
	if end < len(m.pager.lines) {
		b.WriteString(stHelp.Render(fmt.Sprintf("── lines %d–%d of %d (pgdn/space for more) ──", m.pager.top+1, end, len(m.pager.lines))) + "\n")
	}
	return b.String()
}

// styleDiffLine colours a sanitized patch line: the escapes it adds are
// the TUI's own.
func (m *model) styleDiffLine(l string) string {
	switch {
	case m.plain, !m.pager.diff:
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
