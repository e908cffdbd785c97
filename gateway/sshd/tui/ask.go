package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// The side question (A) and the egress allow-list (e): SSH's `ask` and
// `allow --set` through the same core calls, each from a one-line prompt
// about the selected (or open) box. A side answer opens in the pager; the
// allow-list prompt starts with the box's list, and Enter makes the list
// exactly what it holds then (empty: none). Every rule is the core's.

type askMsg struct {
	box    string
	answer string
	err    error
}

// startPrompt opens the prompt k asks for about the target box.
func (m *model) startPrompt(k tea.KeyPressMsg) tea.Cmd {
	name := m.target()
	m.input.Reset()
	if key.Matches(k, m.keys.Ask) {
		m.prev, m.mode = m.mode, modeAsk
		return nil
	}
	m.input.SetValue(strings.Join(m.boxes[name].Allow, " "))
	m.input.CursorEnd()
	m.prev, m.mode = m.mode, modeAllow
	return nil
}

// acceptPrompt sends what the ask or allow prompt holds.
func (m *model) acceptPrompt(was mode, name, text string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	if was == modeAllow {
		list := strings.Fields(strings.ReplaceAll(text, ",", " "))
		m.status = "setting the allow-list of " + name + "…"
		return func() tea.Msg {
			b, err := f.SetAllow(ctx, caller, name, list)
			if err != nil {
				return doneMsg{err: err}
			}
			if len(b.Allow) == 0 {
				return doneMsg{what: fmt.Sprintf("%s may reach no extra domain", name)}
			}
			return doneMsg{what: fmt.Sprintf("%s may reach: %s", name, strings.Join(b.Allow, " "))}
		}
	}
	q := strings.TrimSpace(text)
	if q == "" {
		m.status = "empty question: nothing asked"
		return nil
	}
	m.status = "asking " + name + "… (a read-only side session answers; this can take a minute)"
	return func() tea.Msg {
		a, err := f.Ask(ctx, caller, name, q, false)
		return askMsg{box: name, answer: a.String(), err: err}
	}
}

// applyAsk shows a side answer in the pager, or, when the user has moved
// on to a form or prompt meanwhile, its first line in the status line.
func (m *model) applyAsk(msg askMsg) {
	if msg.err != nil {
		m.status = "error: " + oneLine(msg.err.Error())
		return
	}
	if m.mode != modeTable && m.mode != modeBox {
		m.status = "side answer from " + msg.box + ": " + oneLine(msg.answer)
		return
	}
	m.status = ""
	m.pager.gen++
	m.pager = pagerState{title: "side answer from box " + safe(msg.box), box: msg.box, from: m.mode, gen: m.pager.gen, lines: answerLines(msg.answer)}
	m.mode = modePager
}

// answerLines is a side answer as the pager shows it, every line through
// the terminal sanitizer.
func answerLines(a string) []string {
	a = strings.TrimRight(a, "\n")
	if strings.TrimSpace(a) == "" {
		return []string{"(the side session gave no answer)"}
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		out = append(out, safe(strings.TrimSuffix(l, "\r")))
	}
	return out
}

// prompting says whether the prompt line holds a text input.
func (m *model) prompting() bool {
	switch m.mode {
	case modeFilter, modeAnswer, modeAsk, modeAllow, modeTitle, modeRepo:
		return true
	}
	return false
}
