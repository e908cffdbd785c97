package tui

import (
	"fmt"
	"strings"

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
	value       string
	toggle      bool // a yes/no field: space flips it
}

const (
	fTask = iota
	fRepos
	fRef
	fAgent
	fAllow
	fKeep
)

func newForm() form {
	return form{fields: []field{
		{label: "Task", hint: "what the agent should do"},
		{label: "Repos", hint: "owner/name or https URL, comma separated"},
		{label: "Ref", hint: "branch, tag or commit (default branch if empty)"},
		{label: "Agent", hint: "claude (default) or script"},
		{label: "Allow", hint: "extra egress domains, comma separated"},
		{label: "Keep", hint: "never destroy while asleep (space toggles)", value: "no", toggle: true},
	}}
}

func (f *form) paste(s string) {
	if fl := &f.fields[f.focus]; !fl.toggle {
		fl.value += s
	}
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
		Task:  strings.TrimSpace(f.fields[fTask].value),
		Agent: strings.TrimSpace(f.fields[fAgent].value),
		Allow: splitList(f.fields[fAllow].value),
		Keep:  f.fields[fKeep].value == "yes",
	}
	ref := strings.TrimSpace(f.fields[fRef].value)
	for _, r := range splitList(f.fields[fRepos].value) {
		req.Repos = append(req.Repos, fleet.RepoSpec{Repo: r, Ref: ref})
	}
	return req
}

type delegatedMsg struct {
	box fleet.Box
	err error
}

func (m *model) formKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	f := &m.form
	if f.busy {
		return m, nil
	}
	fl := &f.fields[f.focus]
	switch k.String() {
	case "esc":
		m.mode = modeTable
		m.status = "cancelled"
		return m, nil
	case "tab", "down":
		f.focus = (f.focus + 1) % len(f.fields)
	case "shift+tab", "up":
		f.focus = (f.focus + len(f.fields) - 1) % len(f.fields)
	case "enter":
		if f.focus < len(f.fields)-1 {
			f.focus++
			return m, nil
		}
		return m, m.submit()
	case "ctrl+s":
		return m, m.submit()
	case "space":
		if fl.toggle {
			fl.value = map[string]string{"yes": "no", "no": "yes"}[fl.value]
		} else {
			fl.value += " "
		}
	case "backspace":
		if r := []rune(fl.value); len(r) > 0 && !fl.toggle {
			fl.value = string(r[:len(r)-1])
		}
	case "ctrl+u":
		if !fl.toggle {
			fl.value = ""
		}
	default:
		if k.Text != "" && !fl.toggle {
			fl.value += k.Text
		} else if fl.toggle && (k.Text == "y" || k.Text == "n") {
			fl.value = map[string]string{"y": "yes", "n": "no"}[k.Text]
		}
	}
	return m, nil
}

// submit delegates and goes back to the table at once: the new box shows
// up through the core's events while it boots. A refusal reopens the form
// with everything typed.
func (m *model) submit() tea.Cmd {
	req := m.form.request()
	m.form.busy = true
	m.mode = modeTable
	m.status = "delegating…"
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	return func() tea.Msg {
		b, err := f.Delegate(ctx, caller, req)
		return delegatedMsg{b, err}
	}
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
	m.form = newForm()
	m.boxes[msg.box.Name] = msg.box
	m.reorder()
	m.status = fmt.Sprintf("created box %s (%s)", msg.box.Name, msg.box.State)
	return nil
}

func (f *form) view() string {
	var b strings.Builder
	b.WriteString(stTitle.Render("Delegate a task to a new box") + "\n\n")
	for i, fl := range f.fields {
		cursor := "  "
		val := fl.value
		if i == f.focus {
			cursor = "> "
			if !fl.toggle {
				val += "█"
			}
		}
		b.WriteString(fmt.Sprintf("%s%-6s %s\n", cursor, fl.label+":", safe(val)))
		b.WriteString(stHelp.Render("         "+fl.hint) + "\n")
	}
	if f.busy {
		b.WriteString("\ncreating the box…\n")
	}
	return b.String()
}
