package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
)

// The inbox list (i): the follow-ups queued for the selected (or open)
// box while its agent works, oldest first, as SSH's `inbox BOX` lists
// them; d removes the selected one (confirmed) through the same core
// call as `inbox rm`. The list is read again after a removal and on
// every change of the box, so an item the box took leaves it.

// actRemoveInbox is the confirmed action of d in the inbox list.
const actRemoveInbox = "remove from the inbox of"

type inboxState struct {
	box     string
	from    mode // where esc returns
	gen     int
	loading bool
	items   []fleet.InboxItem
	err     string
	cursor  int
}

type inboxMsg struct {
	gen   int
	box   string
	items []fleet.InboxItem
	err   error
}

type inboxRemoved struct {
	box string
	id  int64
	err error
}

// openInbox shows box name's inbox, loading it from the core.
func (m *model) openInbox(name string) tea.Cmd {
	m.inbox.gen++
	m.inbox = inboxState{box: name, from: m.mode, gen: m.inbox.gen, loading: true}
	m.mode = modeInbox
	return m.loadInbox()
}

func (m *model) loadInbox() tea.Cmd {
	f, ctx, caller, name, gen := m.o.Fleet, m.ctx, m.o.Caller, m.inbox.box, m.inbox.gen
	return func() tea.Msg {
		items, err := f.Inbox(ctx, caller, name)
		return inboxMsg{gen: gen, box: name, items: items, err: err}
	}
}

// viewingInbox says whether the inbox list of box name is on the screen
// (or under a confirmation or the help page opened from it).
func (m *model) viewingInbox(name string) bool {
	in := m.mode == modeInbox || (m.mode == modeConfirm || m.mode == modeHelp) && m.prev == modeInbox
	return in && m.inbox.box == name
}

func (m *model) applyInbox(msg inboxMsg) {
	if msg.gen != m.inbox.gen || msg.box != m.inbox.box {
		return // a list left or replaced meanwhile
	}
	m.inbox.loading = false
	if msg.err != nil {
		m.inbox.err, m.inbox.items = oneLine(msg.err.Error()), nil
		return
	}
	m.inbox.err, m.inbox.items = "", msg.items
	m.inbox.cursor = min(m.inbox.cursor, max(len(msg.items)-1, 0))
}

// removeInbox deletes item id of box name (after the confirmation).
func (m *model) removeInbox(name string, id int64) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	m.status = fmt.Sprintf("removing inbox item %d of %s…", id, name)
	return func() tea.Msg {
		return inboxRemoved{box: name, id: id, err: f.RemoveInbox(ctx, caller, name, id)}
	}
}

func (m *model) inboxRemoved(msg inboxRemoved) tea.Cmd {
	if msg.err != nil {
		m.status = "error: " + oneLine(msg.err.Error())
	} else {
		m.status = fmt.Sprintf("removed inbox item %d of %s", msg.id, msg.box)
	}
	if m.viewingInbox(msg.box) {
		m.inbox.gen++
		return m.loadInbox()
	}
	return nil
}

// inboxKey moves in the inbox list, asks to remove an item, or leaves.
func (m *model) inboxKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	keys, last := m.keys, max(len(m.inbox.items)-1, 0)
	switch {
	case key.Matches(k, keys.Back), key.Matches(k, keys.Quit), key.Matches(k, keys.Inbox):
		m.mode = m.inbox.from
		m.inbox.gen++ // a load still under way is dropped
	case key.Matches(k, keys.Help):
		m.prev, m.mode = modeInbox, modeHelp
	case key.Matches(k, keys.Up):
		m.inbox.cursor = max(m.inbox.cursor-1, 0)
	case key.Matches(k, keys.Down):
		m.inbox.cursor = min(m.inbox.cursor+1, last)
	case key.Matches(k, keys.Top):
		m.inbox.cursor = 0
	case key.Matches(k, keys.Bottom):
		m.inbox.cursor = last
	case key.Matches(k, keys.Remove):
		if m.inbox.cursor < len(m.inbox.items) {
			m.confirm.what, m.confirm.box, m.confirm.item = actRemoveInbox, m.inbox.box, m.inbox.items[m.inbox.cursor].ID
			m.prev, m.mode = modeInbox, modeConfirm
		}
	}
	return m, nil
}

func (m *model) inboxView() string {
	now := m.o.Now()
	var b strings.Builder
	title := "inbox of box " + safe(m.inbox.box)
	if !m.inbox.loading && m.inbox.err == "" {
		title += fmt.Sprintf(" — %d queued follow-up(s), oldest first", len(m.inbox.items))
	}
	b.WriteString(stTitle.Render(title) + "\n")
	switch {
	case m.inbox.loading:
		b.WriteString("\n  reading the inbox…\n")
		return b.String()
	case m.inbox.err != "":
		b.WriteString("\n  " + stDel.Render("error: "+safe(m.inbox.err)) + "\n")
		return b.String()
	case len(m.inbox.items) == 0:
		b.WriteString("\n  the inbox is empty: follow-ups sent while the agent works queue here\n")
		return b.String()
	}
	rows := max(m.h-4, 1)
	start := 0
	if m.inbox.cursor >= rows {
		start = m.inbox.cursor - rows + 1
	}
	for i := start; i < len(m.inbox.items) && i < start+rows; i++ {
		it := m.inbox.items[i]
		line := fmt.Sprintf("#%-5d %-5s %-10s %s", it.ID, Age(now, it.At), safe(it.By), safe(oneLine(it.Text.String())))
		line = truncate(line, max(m.w-2, 1))
		switch {
		case m.plain && i == m.inbox.cursor:
			line = "> " + line
		case m.plain:
			line = "  " + line
		case i == m.inbox.cursor:
			line = stSel.Render(line)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
