package tui

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/forge"
)

// The title (t) and add-a-repository (r) prompts and the pull request's
// merge (M) and close (C): SSH's `title`, `repo add`, `pr merge` and `pr
// close` through the same core calls, about the selected (or open) box.
// Every rule (a title's length, the repo's reach, whether there is a pull
// request to merge) is the core's; its error goes to the status line.

// The confirmed actions of M and C: the pull request of the box's only
// pushable repository, merged with a merge commit (SSH's default) or
// closed without merging.
const (
	actMerge   = "merge the pull request of"
	actClosePR = "close the pull request of"
)

// startEdit opens the prompt k asks for about the target box: the title
// prompt starts with the box's title, the repository prompt empty.
func (m *model) startEdit(k tea.KeyPressMsg) {
	m.input.Reset()
	if key.Matches(k, m.keys.Title) {
		m.input.SetValue(typed(oneLine(m.boxes[m.target()].Title.String())))
		m.input.CursorEnd()
		m.prev, m.mode = m.mode, modeTitle
		return
	}
	m.prev, m.mode = m.mode, modeRepo
}

// acceptEdit sends what the title or repository prompt holds to the core,
// as typed: the core trims, checks and refuses.
func (m *model) acceptEdit(was mode, name, text string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	if was == modeTitle {
		m.status = "titling " + name + "…"
		return func() tea.Msg {
			b, err := f.SetTitle(ctx, caller, name, text)
			if err != nil {
				return doneMsg{err: err}
			}
			return doneMsg{what: fmt.Sprintf("box %s is titled %q (its name stays %s)", b.Name, b.Title.String(), b.Name)}
		}
	}
	spec := fleet.ParseRepoSpec(text)
	m.status = "adding " + spec.Repo + " to " + name + "… (cloned, then copied into the box)"
	return func() tea.Msg {
		b, err := f.AddRepo(ctx, caller, name, spec)
		if err != nil {
			return doneMsg{err: err}
		}
		return doneMsg{what: addedLine(b, spec)}
	}
}

// addedLine says where the added repository is, as `repo add` does.
func addedLine(b fleet.Box, spec fleet.RepoSpec) string {
	if len(b.Repos) == 0 {
		return "added " + spec.Repo + " to " + b.Name
	}
	r := b.Repos[len(b.Repos)-1]
	for _, x := range b.Repos {
		if strings.EqualFold(x.Name, spec.Repo) {
			r = x
		}
	}
	return fmt.Sprintf("added %s to %s in /workspace/%s (branch %s; the box may push that branch only)", r.Name, b.Name, r.Dir, r.Branch)
}

// endPR merges or closes the box's pull request: the status line gets
// the merge commit, or the core's reason (no pull request yet, the branch
// moved since its card, no forge on this gateway).
func endPR(m *model, what, name string) tea.Cmd {
	f, ctx, caller := m.o.Fleet, m.ctx, m.o.Caller
	return func() tea.Msg {
		if what == actMerge {
			p, err := f.MergePR(ctx, caller, name, "", forge.Merge)
			return doneMsg{what: fmt.Sprintf("%s: merged %s#%d as %s", name, p.Repo, p.Number, shortSHA(p.MergeSHA)), err: err}
		}
		p, err := f.ClosePR(ctx, caller, name, "")
		return doneMsg{what: fmt.Sprintf("%s: closed %s#%d without merging", name, p.Repo, p.Number), err: err}
	}
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
