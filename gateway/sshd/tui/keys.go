package tui

import (
	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
)

// keyMap is every key the TUI takes, one binding per action: Update
// matches against these and the help bar and help page are drawn from
// them, so what help advertises is what the keys do. A key belongs to one
// binding per mode (k moves up; keep is K).
type keyMap struct {
	// table and box view
	Up, Down, Top, Bottom key.Binding
	PageUp, PageDown      key.Binding
	Follow                key.Binding
	Open, Back, Quit      key.Binding
	New, Answer           key.Binding
	Sleep, Wake, Keep     key.Binding
	Destroy               key.Binding
	PR                    key.Binding
	Diff, Ask, Allow      key.Binding
	Title, AddRepo        key.Binding
	Merge, ClosePR, Inbox key.Binding
	Sort, Filter, Help    key.Binding
	// Remove asks to delete the inbox list's selected item.
	Remove key.Binding
	// move is Up and Down shown as one entry in the short help bar.
	move key.Binding
	// scroll is Up and Down in the box view, where they scroll the log.
	scroll key.Binding
	// sleepWake is Sleep and Wake as one entry in the short help bar.
	sleepWake key.Binding

	// prompts (filter, answer) and the delegate form
	Accept, Cancel, Clear   key.Binding
	NextField, PrevField    key.Binding
	NextOrSubmit, Submit    key.Binding
	Toggle                  key.Binding
	cursorMove              key.Binding // help only: the text input's own ←/→
	Confirm, ForceQuit, Any key.Binding
}

func newKeyMap() keyMap {
	b := func(help, desc string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return keyMap{
		Up:        b("↑/k", "up", "up", "k"),
		Down:      b("↓/j", "down", "down", "j"),
		Top:       b("home/g", "first", "home", "g"),
		Bottom:    b("end/G", "last", "end", "G"),
		Follow:    b("end/G", "follow the log", "end", "G"),
		PageUp:    b("pgup", "page up", "pgup"),
		PageDown:  b("pgdn", "page down", "pgdown"),
		Open:      b("⏎", "open", "enter"),
		Back:      b("esc", "back", "esc"),
		Quit:      b("q", "quit", "q"),
		New:       b("n", "new", "n"),
		Answer:    b("a", "answer", "a"),
		Sleep:     b("z", "sleep", "z"),
		Wake:      b("w", "wake", "w"),
		Keep:      b("K", "keep", "K"),
		Destroy:   b("d", "destroy", "d"),
		PR:        b("P", "push and open a pull request", "P"),
		Diff:      b("D", "diff", "D"),
		Ask:       b("A", "side question", "A"),
		Allow:     b("e", "egress", "e"),
		Title:     b("t", "title", "t"),
		AddRepo:   b("r", "add a repository", "r"),
		Merge:     b("M", "merge the pull request", "M"),
		ClosePR:   b("C", "close the pull request", "C"),
		Inbox:     b("i", "inbox", "i"),
		Remove:    b("d", "remove the item", "d"),
		Sort:      b("s", "sort", "s"),
		Filter:    b("/", "filter", "/"),
		Help:      b("?", "help", "?"),
		move:      b("↑↓/jk", "move", "up", "down", "k", "j"),
		scroll:    b("↑↓/jk", "scroll", "up", "down", "k", "j"),
		sleepWake: b("z/w", "sleep/wake", "z", "w"),

		Accept:       b("⏎", "done", "enter"),
		Cancel:       b("esc", "cancel", "esc"),
		Clear:        b("ctrl+u", "clear", "ctrl+u"),
		NextField:    b("tab/↓", "next field", "tab", "down"),
		PrevField:    b("shift+tab/↑", "previous field", "shift+tab", "up"),
		NextOrSubmit: b("⏎", "next/submit", "enter"),
		Submit:       b("ctrl+s", "submit", "ctrl+s"),
		Toggle:       b("space", "toggle", "space"),
		cursorMove:   b("←→", "move cursor", "left", "right"),
		Confirm:      b("y", "confirm", "y", "Y"),
		Any:          b("any other key", "cancels", "n", "N", "esc"),
		ForceQuit:    b("ctrl+c", "quit", "ctrl+c"),
	}
}

// bindings is a mode's keys for the help bubble: the short bar and the
// full page's columns.
type bindings struct {
	short []key.Binding
	full  [][]key.Binding
}

func (b bindings) ShortHelp() []key.Binding  { return b.short }
func (b bindings) FullHelp() [][]key.Binding { return b.full }

var _ help.KeyMap = bindings{}

// tableHelp: the bar has moving, help and quit first, so a narrow
// terminal cuts only actions; ? opens the page with all of them.
func (k keyMap) tableHelp() bindings {
	return bindings{
		short: []key.Binding{k.move, k.Open, k.Help, k.Quit, k.New, k.Answer, k.Diff, k.sleepWake, k.Keep, k.Destroy, k.Filter, k.Sort},
		full: [][]key.Binding{
			{k.Up, k.Down, k.Top, k.Bottom, k.Open, k.Filter, k.Sort},
			{k.New, k.Answer, k.Diff, k.Ask, k.Allow, k.Sleep, k.Wake, k.Keep, k.Destroy},
			{k.Title, k.AddRepo, k.Inbox, k.PR, k.Merge, k.ClosePR},
			{k.Help, k.Quit, k.ForceQuit},
		},
	}
}

func (k keyMap) boxHelp() bindings {
	back := k.Back
	back.SetHelp("esc/q", "back")
	return bindings{
		short: []key.Binding{back, k.Help, k.Answer, k.Diff, k.sleepWake, k.Keep, k.Destroy, k.scroll, k.ForceQuit},
		full: [][]key.Binding{
			{k.Up, k.Down, k.PageUp, k.PageDown, k.Follow, back},
			{k.Answer, k.Diff, k.Ask, k.Allow, k.Sleep, k.Wake, k.Keep, k.Destroy},
			{k.Title, k.AddRepo, k.Inbox, k.PR, k.Merge, k.ClosePR},
		},
	}
}

// pagerHelp: the diff view and a side answer scroll like a pager; esc, q
// or D leave them.
func (k keyMap) pagerHelp() bindings {
	back := k.Back
	back.SetHelp("esc/q/D", "back")
	page := k.PageDown
	page.SetHelp("pgdn/space", "page down")
	return bindings{
		short: []key.Binding{back, k.scroll, k.PageUp, page, k.Top, k.Bottom, k.Help},
		full:  [][]key.Binding{{k.Up, k.Down, k.PageUp, page, k.Top, k.Bottom, back}},
	}
}

// inboxHelp: the inbox list moves like the table; d removes the selected
// item (confirmed); esc, q or i leave it.
func (k keyMap) inboxHelp() bindings {
	back := k.Back
	back.SetHelp("esc/q/i", "back")
	return bindings{
		short: []key.Binding{back, k.move, k.Remove, k.Help},
		full:  [][]key.Binding{{k.Up, k.Down, k.Top, k.Bottom, k.Remove, back}},
	}
}

func (k keyMap) formHelp() bindings {
	return bindings{short: []key.Binding{k.NextField, k.Toggle, k.NextOrSubmit, k.Submit, k.Cancel, k.cursorMove}}
}

func (k keyMap) promptHelp() bindings {
	return bindings{short: []key.Binding{k.Accept, k.Cancel, k.Clear, k.cursorMove}}
}

func (k keyMap) confirmHelp() bindings {
	return bindings{short: []key.Binding{k.Confirm, k.Any}}
}
