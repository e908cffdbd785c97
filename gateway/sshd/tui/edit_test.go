package tui

import (
	"strconv"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/fleettest"
)

// TestKeysDoNotCollide: within each mode's help page a key does one
// thing (k is up, K keep; t, r, i, M and C are new).
func TestKeysDoNotCollide(t *testing.T) {
	k := newKeyMap()
	for mode, b := range map[string]bindings{"table": k.tableHelp(), "box view": k.boxHelp(), "pager": k.pagerHelp(), "inbox": k.inboxHelp()} {
		seen := map[string]string{}
		for _, col := range b.FullHelp() {
			for _, kb := range col {
				for _, key := range kb.Keys() {
					if was, ok := seen[key]; ok && was != kb.Help().Desc {
						t.Errorf("%s: key %q is both %q and %q", mode, key, was, kb.Help().Desc)
					}
					seen[key] = kb.Help().Desc
				}
			}
		}
	}
}

// driver runs the TUI's model against the real core, as Bubble Tea
// would: a key's command runs and its message goes back to Update, until
// no command is left (the core's events are not pumped: the test reads
// the core's state itself).
type driver struct {
	t *testing.T
	m *model
}

func (d driver) run(cmd tea.Cmd) {
	d.t.Helper()
	for cmd != nil {
		msg := cmd()
		if _, ok := msg.(tea.BatchMsg); ok {
			d.t.Fatalf("unexpected batch %T", msg)
		}
		_, cmd = d.m.Update(msg)
	}
}

func (d driver) press(keys ...tea.KeyPressMsg) {
	d.t.Helper()
	for _, k := range keys {
		_, cmd := d.m.Update(k)
		d.run(cmd)
	}
}

func (d driver) typeText(s string) {
	d.t.Helper()
	for _, c := range s {
		d.press(tea.KeyPressMsg{Code: c, Text: string(c)})
	}
}

var (
	enter = tea.KeyPressMsg{Code: tea.KeyEnter}
	esc   = tea.KeyPressMsg{Code: tea.KeyEscape}
	ctrlU = tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
)

func r(c rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: c, Text: string(c)} }

// TestEditKeysAgainstTheCore drives the new keys through the model
// against the real core (fleettest: SQLite, a QEMU box running a script
// agent mid-turn, the git server holding acme/widget): t retitles the box
// (an empty or too-long title shows the core's refusal and changes
// nothing); r adds acme/widget@main (a second time, and an unknown repo,
// show the core's error); i lists the inbox, where d removes the
// selected item after y (n cancels; an item gone meanwhile shows the
// core's not found); M and C ask, then show the core's answer, which on
// a gateway without a forge is that pull requests are unavailable.
func TestEditKeysAgainstTheCore(t *testing.T) {
	e := fleettest.New(t, fleettest.Options{})
	ctx := t.Context()
	alice := e.Actors["alice"]
	b, err := e.Fleet.Delegate(ctx, alice, fleet.DelegateRequest{Agent: "script", Task: "!say start\n!sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	e.WaitLog(alice, b.Name, "start")
	m := newModel(ctx, Options{Fleet: e.Fleet, Caller: alice, Now: time.Now, Width: 140, Height: 20}, true)
	d := driver{t, m}
	d.run(m.loadBoxes())
	if m.selected() != b.Name {
		t.Fatalf("the table holds %v", m.order)
	}
	get := func() fleet.Box {
		t.Helper()
		b, err := e.Fleet.Get(ctx, alice, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	help := strings.Join(strings.Fields(sgr.ReplaceAllString(m.helpView(), "")), " ")
	for _, want := range []string{"t title", "r add a repository", "i inbox", "M merge the pull request", "C close the pull request", "d remove the item"} {
		if !strings.Contains(help, want) {
			t.Errorf("the help page does not list %q:\n%s", want, help)
		}
	}

	// t: the prompt starts with the title; Enter saves what it holds.
	d.press(r('t'))
	if m.mode != modeTitle || m.input.Value() != b.Title.String() || !strings.Contains(m.promptLine(), "title of "+b.Name+": ") {
		t.Fatalf("t: mode %d, input %q (title %q), prompt %q", m.mode, m.input.Value(), b.Title.String(), m.promptLine())
	}
	d.press(ctrlU)
	d.typeText("parser: flaky test")
	d.press(enter)
	if got := get().Title.String(); got != "parser: flaky test" || !strings.Contains(m.status, `is titled "parser: flaky test"`) || m.mode != modeTable {
		t.Fatalf("after t: the core's title %q, status %q, mode %d", got, m.status, m.mode)
	}
	for _, c := range []struct{ text, want string }{
		{"", "error: empty title"},
		{strings.Repeat("x", fleet.MaxTitleLen+1), "error: title is 81 characters (max 80)"},
	} {
		d.press(r('t'), ctrlU)
		d.run(func() tea.Msg { return tea.PasteMsg{Content: c.text} })
		d.press(enter)
		if got := get().Title.String(); got != "parser: flaky test" || !strings.HasPrefix(m.status, c.want) {
			t.Errorf("title %q: the core's title %q, status %q (want %q)", c.text, got, m.status, c.want)
		}
	}
	// From the box view, t is about the open box and esc goes back there.
	d.run(m.getBox(b.Name))       // what the title's event does (applyEvent)
	m.Update(m.openBox(b.Name)()) // the log's tail is not followed
	d.press(r('t'))
	if m.mode != modeTitle || m.input.Value() != "parser: flaky test" {
		t.Fatalf("t in the box view: mode %d, input %q", m.mode, m.input.Value())
	}
	d.press(esc)
	if m.mode != modeBox {
		t.Fatalf("esc from the title prompt: mode %d", m.mode)
	}
	m.closeBox()

	// r: owner/name[@ref], split as SSH's repo add splits it.
	d.press(r('r'))
	if m.mode != modeRepo || m.input.Value() != "" || !strings.Contains(m.promptLine(), "add to "+b.Name+" (owner/name[@ref]): ") {
		t.Fatalf("r: mode %d, input %q, prompt %q", m.mode, m.input.Value(), m.promptLine())
	}
	d.typeText("acme/widget@main")
	d.press(enter)
	got := get()
	if len(got.Repos) != 1 || got.Repos[0].Name != "acme/widget" || got.Repos[0].Ref != "main" ||
		!strings.HasPrefix(m.status, "added acme/widget to "+b.Name+" in /workspace/widget (branch sbx/") {
		t.Fatalf("after r: repos %+v, status %q", got.Repos, m.status)
	}
	for _, c := range []struct{ spec, want string }{
		{"acme/widget", "error: box \"" + b.Name + "\" already has acme/widget (in /workspace/widget): conflict"},
		{"acme/nope", "error: repo acme/nope (work: repository not found or not visible to this token): none of the user's accounts reaches the repository; add an account"},
		{"", `error: repo "": invalid`},
	} {
		d.press(r('r'))
		d.typeText(c.spec)
		d.press(enter)
		if n := len(get().Repos); n != 1 || !strings.HasPrefix(m.status, c.want) {
			t.Errorf("r %q: %d repos, status %q", c.spec, n, m.status)
		}
	}

	// i: the queued follow-ups; d and y remove the selected one.
	var ids []int64
	for _, text := range []string{"first", "second \x1b]0;owned\x07"} {
		res, err := e.Fleet.FollowUp(ctx, alice, b.Name, text, false)
		if err != nil || res.Outcome != fleet.Queued {
			t.Fatalf("follow-up mid-turn: %+v %v", res, err)
		}
		ids = append(ids, res.InboxID)
	}
	d.press(r('i'))
	view := m.inboxView()
	if m.mode != modeInbox || len(m.inbox.items) != 2 || !strings.Contains(view, "inbox of box "+b.Name+" — 2 queued") ||
		!strings.Contains(view, "first") || strings.Contains(view, "\x1b]0;") || !strings.Contains(view, `second \u001b]0;owned\u0007`) {
		t.Fatalf("i: mode %d, view:\n%q", m.mode, view)
	}
	if bar := sgr.ReplaceAllString(m.helpBar(), ""); !strings.Contains(bar, "esc/q/i back") || !strings.Contains(bar, "d remove the item") {
		t.Errorf("inbox help bar %q", bar)
	}
	d.press(r('j'), r('d'))
	if m.mode != modeConfirm || !strings.Contains(m.promptLine(), "remove inbox item "+itoa(ids[1])+" of "+b.Name+"? y/N") {
		t.Fatalf("d: mode %d, prompt %q", m.mode, m.promptLine())
	}
	d.press(r('n'))
	if items, _ := e.Fleet.Inbox(ctx, alice, b.Name); len(items) != 2 || m.mode != modeInbox || m.status != "cancelled" {
		t.Fatalf("n: %d items, mode %d, status %q", len(items), m.mode, m.status)
	}
	d.press(r('d'), r('y'))
	items, err := e.Fleet.Inbox(ctx, alice, b.Name)
	if err != nil || len(items) != 1 || items[0].ID != ids[0] || m.status != "removed inbox item "+itoa(ids[1])+" of "+b.Name ||
		len(m.inbox.items) != 1 || m.inbox.cursor != 0 || m.mode != modeInbox {
		t.Fatalf("d y: core %+v %v, status %q, list %+v", items, err, m.status, m.inbox.items)
	}
	// Another front removes the last item: the stale row's removal shows
	// the core's not found.
	if err := e.Fleet.RemoveInbox(ctx, alice, b.Name, ids[0]); err != nil {
		t.Fatal(err)
	}
	d.press(r('d'), r('y'))
	if !strings.HasPrefix(m.status, "error: inbox item "+itoa(ids[0])) || !strings.Contains(m.status, "not found") ||
		len(m.inbox.items) != 0 || !strings.Contains(m.inboxView(), "the inbox is empty") {
		t.Fatalf("a stale removal: status %q, list %+v", m.status, m.inbox.items)
	}
	d.press(esc)
	if m.mode != modeTable {
		t.Fatalf("esc from the inbox: mode %d", m.mode)
	}

	// M and C: confirmed, then the core's answer in the status line.
	for _, c := range []struct {
		key  rune
		what string
	}{{'M', "merge the pull request of "}, {'C', "close the pull request of "}} {
		d.press(r(c.key))
		if m.mode != modeConfirm || !strings.Contains(m.promptLine(), c.what+b.Name+"? y/N") {
			t.Fatalf("%c: mode %d, prompt %q", c.key, m.mode, m.promptLine())
		}
		d.press(r('n'))
		if m.status != "cancelled" {
			t.Errorf("%c n: status %q", c.key, m.status)
		}
		d.press(r(c.key), r('y'))
		// The core's answer: the harness's forge has no pull request for the box.
		if !strings.HasPrefix(m.status, `error: box "`+b.Name+`" has no pull request for acme/widget yet: open one`) {
			t.Errorf("%c y: status %q", c.key, m.status)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
