package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
)

// form is the delegate form: the fields of fleet.DelegateRequest.
type form struct {
	fields []field
	focus  int
	busy   bool
}

type field struct {
	label, hint string
	input       textinput.Model // a text field's value and cursor
	toggle      bool            // a yes/no field: space flips it
	on          bool            // a toggle's value
}

func (fl field) value() string { return fl.input.Value() }

// formIndent is the cells before a field's value: the focus marker
// and the label column (view).
const formIndent = len("> ") + 6 + 1

const (
	fTask = iota
	fRepos
	fRef
	fAgent
	fAllow
	fKeep
)

func newForm(width int) form {
	f := form{fields: []field{
		{label: "Task", hint: "what the agent should do"},
		{label: "Repos", hint: "owner/name or https URL, comma separated"},
		{label: "Ref", hint: "branch, tag or commit (default branch if empty)"},
		{label: "Agent", hint: "claude (default) or script"},
		{label: "Allow", hint: "extra egress domains, comma separated"},
		{label: "Keep", hint: "never destroy while asleep (space toggles)", toggle: true},
	}}
	for i := range f.fields {
		f.fields[i].input = newInput()
		f.fields[i].input.Blur()
	}
	f.setWidth(width)
	f.setFocus(0)
	return f
}

// setWidth fits the text fields to the terminal: a longer value scrolls
// sideways.
func (f *form) setWidth(w int) {
	for i := range f.fields {
		f.fields[i].input.SetWidth(max(w-formIndent-1, 1))
	}
}

// setFocus moves the focus (and the text cursor) to field i, wrapping.
func (f *form) setFocus(i int) {
	f.fields[f.focus].input.Blur()
	f.focus = (i + len(f.fields)) % len(f.fields)
	if fl := &f.fields[f.focus]; !fl.toggle {
		fl.input.Focus()
	}
}

// update hands msg (a key or a paste) to the focused text field.
func (f *form) update(msg tea.Msg) tea.Cmd {
	fl := &f.fields[f.focus]
	if fl.toggle {
		return nil
	}
	var cmd tea.Cmd
	fl.input, cmd = fl.input.Update(msg)
	return cmd
}

// cursor is where the terminal's cursor shows: in the focused text field,
// if the body has room for it.
func (f *form) cursor(bodyHeight int) *tea.Cursor {
	fl := f.fields[f.focus]
	if fl.toggle || f.busy {
		return nil
	}
	c := fl.input.Cursor()
	if c == nil {
		return nil
	}
	c.X += formIndent
	c.Y = 2 + 2*f.focus // title, blank line, two lines a field
	if c.Y >= bodyHeight {
		return nil
	}
	return c
}

func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func (f *form) request() fleet.DelegateRequest {
	req := fleet.DelegateRequest{
		Task:  strings.TrimSpace(f.fields[fTask].value()),
		Agent: strings.TrimSpace(f.fields[fAgent].value()),
		Allow: splitList(f.fields[fAllow].value()),
		Keep:  f.fields[fKeep].on,
	}
	ref := strings.TrimSpace(f.fields[fRef].value())
	for _, r := range splitList(f.fields[fRepos].value()) {
		req.Repos = append(req.Repos, fleet.RepoSpec{Repo: r, Ref: ref})
	}
	return req
}

type delegatedMsg struct {
	box fleet.Box
	err error
}

func (m *model) formKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	f, keys := &m.form, m.keys
	if f.busy {
		return m, nil
	}
	fl := &f.fields[f.focus]
	switch {
	case key.Matches(k, keys.Cancel):
		m.mode = modeTable
		m.status = "cancelled"
	case key.Matches(k, keys.NextField):
		f.setFocus(f.focus + 1)
	case key.Matches(k, keys.PrevField):
		f.setFocus(f.focus - 1)
	case key.Matches(k, keys.NextOrSubmit):
		if f.focus < len(f.fields)-1 {
			f.setFocus(f.focus + 1)
			return m, nil
		}
		return m, m.submit()
	case key.Matches(k, keys.Submit):
		return m, m.submit()
	case fl.toggle:
		switch {
		case key.Matches(k, keys.Toggle):
			fl.on = !fl.on
		case k.Text == "y" || k.Text == "n":
			fl.on = k.Text == "y"
		}
	case key.Matches(k, keys.Clear):
		fl.input.Reset()
	default:
		return m, f.update(typedKey(k))
	}
	return m, nil
}

// stepMsg is one of the core's delegate steps (cloning, booting, …) for
// the status line; next waits for the one after it.
type stepMsg struct {
	step  fleet.Step
	steps <-chan fleet.Step
}

// submit delegates and goes back to the table at once: the new box shows
// up through the core's events while it boots, and the status line says
// which step the delegation is at. A refusal reopens the form with
// everything typed.
func (m *model) submit() tea.Cmd {
	req := m.form.request()
	m.form.busy = true
	m.mode = modeTable
	m.status = "delegating…"
	// The core calls Progress on the delegating goroutine, possibly with
	// the box locked: hand the step over without blocking (a delegation
	// has a handful of steps; the buffer holds them all) and let the
	// program read it.
	steps := make(chan fleet.Step, 32)
	req.Progress = func(s fleet.Step) {
		select {
		case steps <- s:
		default:
		}
	}
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	return tea.Batch(func() tea.Msg {
		b, err := f.Delegate(ctx, caller, req)
		close(steps) // Progress is not called after Delegate returns
		return delegatedMsg{b, err}
	}, nextStep(steps))
}

func nextStep(steps <-chan fleet.Step) tea.Cmd {
	return func() tea.Msg {
		s, ok := <-steps
		if !ok {
			return nil
		}
		return stepMsg{s, steps}
	}
}

// stepped shows a step while the delegation runs (a step read after the
// result must not overwrite it).
func (m *model) stepped(msg stepMsg) tea.Cmd {
	if m.form.busy {
		m.status = msg.step.String()
	}
	return nextStep(msg.steps)
}

func (m *model) delegated(msg delegatedMsg) tea.Cmd {
	m.form.busy = false
	if msg.err != nil {
		if m.mode == modeTable {
			m.prev, m.mode = modeTable, modeForm
		}
		m.status = "error: " + oneLine(msg.err.Error())
		return nil
	}
	m.form = newForm(m.w)
	m.boxes[msg.box.Name] = msg.box
	m.reorder()
	m.status = fmt.Sprintf("created box %s (%s)", msg.box.Name, msg.box.State)
	return nil
}

func (f *form) view() string {
	var b strings.Builder
	b.WriteString(stTitle.Render("Delegate a task to a new box") + "\n\n")
	for i, fl := range f.fields {
		marker := "  "
		if i == f.focus {
			marker = "> "
		}
		// The input holds only text that draws as itself (typed).
		val := fl.input.View()
		if fl.toggle {
			val = map[bool]string{true: "yes", false: "no"}[fl.on]
		}
		b.WriteString(fmt.Sprintf("%s%-6s %s\n", marker, fl.label+":", val))
		b.WriteString(stHelp.Render("         "+fl.hint) + "\n")
	}
	if f.busy {
		b.WriteString("\ncreating the box…\n")
	}
	return b.String()
}
