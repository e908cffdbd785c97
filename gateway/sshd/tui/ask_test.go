package tui

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
)

// TestAskAndAllowPrompts: A opens the side-question prompt and e the
// allow-list prompt (filled with the box's list) about the selected box;
// Enter hands them to the core (an empty question is not sent); a side
// answer opens in the pager, sanitized and uncoloured, unless the user
// moved on to a form, where the status line says it came.
func TestAskAndAllowPrompts(t *testing.T) {
	m := &model{keys: newKeyMap(), help: newHelp(), input: newInput(), w: 120, h: 12, mode: modeTable,
		boxes: map[string]fleet.Box{"b1": {Name: "b1", State: fleet.Running, Allow: []string{"pypi.org", "*.example.com:8443"}}}, order: []string{"b1"}}
	m.help.SetWidth(m.w)
	r := func(c rune) tea.KeyPressMsg { return tea.KeyPressMsg{Code: c, Text: string(c)} }
	enter := tea.KeyPressMsg{Code: tea.KeyEnter}

	if bar := sgr.ReplaceAllString(m.helpView(), ""); !strings.Contains(bar, "A side question") || !strings.Contains(bar, "e egress") {
		t.Errorf("the help page does not name A and e:\n%s", bar)
	}
	m.key(r('e'))
	if m.mode != modeAllow || m.input.Value() != "pypi.org *.example.com:8443" {
		t.Fatalf("e: mode %d, input %q", m.mode, m.input.Value())
	}
	if line := m.promptLine(); !strings.Contains(line, "allow-list of b1: ") {
		t.Errorf("allow prompt %q", line)
	}
	if _, cmd := m.key(enter); cmd == nil || m.mode != modeTable || !strings.Contains(m.status, "setting the allow-list of b1") {
		t.Fatalf("enter on the allow prompt: cmd %v, mode %d, status %q", cmd != nil, m.mode, m.status)
	}

	m.key(r('A'))
	if m.mode != modeAsk {
		t.Fatalf("A: mode %d", m.mode)
	}
	if line := m.promptLine(); !strings.Contains(line, "side question to b1: ") {
		t.Errorf("ask prompt %q", line)
	}
	if _, cmd := m.key(enter); cmd != nil || m.status != "empty question: nothing asked" {
		t.Fatalf("an empty question: cmd %v, status %q", cmd != nil, m.status)
	}
	m.key(r('A'))
	for _, c := range "why?" {
		m.key(r(c))
	}
	if _, cmd := m.key(enter); cmd == nil || !strings.Contains(m.status, "asking b1…") {
		t.Fatalf("a question: cmd %v, status %q", cmd != nil, m.status)
	}

	m.applyAsk(askMsg{box: "b1", answer: "side answer to \"why?\":\n+ \x1b]52;c;ZXZpbA==\x07 widget\n- \u202eexe\n"})
	if m.mode != modePager || m.pager.title != "side answer from box b1" || len(m.pager.lines) != 3 {
		t.Fatalf("the answer: mode %d, pager %+v", m.mode, m.pager)
	}
	view := m.pagerView()
	body := view[strings.Index(view, "\n")+1:]
	if strings.ContainsAny(body, "\x1b\x07\u202e") || !strings.Contains(body, `+ \u001b]52;c;ZXZpbA==\u0007 widget`) {
		t.Errorf("the side answer on the terminal:\n%q", body)
	}
	m.pagerKey(tea.KeyPressMsg{Code: tea.KeyEscape})
	if m.mode != modeTable {
		t.Fatalf("esc from the answer: mode %d", m.mode)
	}
	m.mode = modeForm
	m.applyAsk(askMsg{box: "b1", answer: "later\nmore"})
	if m.mode != modeForm || m.status != "side answer from b1: later more" {
		t.Errorf("an answer during the form: mode %d, status %q", m.mode, m.status)
	}
}
