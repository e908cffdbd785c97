package web

import (
	"net/http"
	"strconv"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// The delegate form's repository rows: the form posts repo and ref once
// per row, in order; its add and remove buttons post it with op set
// ("add-repo", "remove-N"), and the answer is the form again with one row
// more or less, as typed. Nothing is delegated then.

// repoRows pairs the posted repo and ref fields, row by row.
func repoRows(r *http.Request) []views.RepoRow {
	repos, refs := r.PostForm["repo"], r.PostForm["ref"]
	rows := make([]views.RepoRow, 0, max(len(repos), len(refs)))
	for i := range max(len(repos), len(refs)) {
		var row views.RepoRow
		if i < len(repos) {
			row.Repo = strings.TrimSpace(repos[i])
		}
		if i < len(refs) {
			row.Ref = strings.TrimSpace(refs[i])
		}
		rows = append(rows, row)
	}
	return rows
}

// editRepoRows answers an add or remove button: the form with the rows
// changed (no more than the core takes, never fewer than one).
func (s *Server) editRepoRows(w http.ResponseWriter, r *http.Request, c caller, f views.DelegateForm, op string) {
	switch {
	case op == "add-repo":
		if len(f.Repos) == 0 {
			f.Repos = append(f.Repos, views.RepoRow{}) // the row shown empty
		}
		if len(f.Repos) < fleet.MaxRepos {
			f.Repos = append(f.Repos, views.RepoRow{})
		}
	case strings.HasPrefix(op, "remove-"):
		i, err := strconv.Atoi(strings.TrimPrefix(op, "remove-"))
		if err != nil || i < 0 || i >= len(f.Repos) {
			s.htmlError(w, r, http.StatusBadRequest, "op "+strconv.Quote(op)+": no such repository row")
			return
		}
		f.Repos = append(f.Repos[:i], f.Repos[i+1:]...)
	default:
		s.htmlError(w, r, http.StatusBadRequest, "op "+strconv.Quote(op)+": want add-repo or remove-N")
		return
	}
	f.Known = s.knownRepos(r, c)
	f.Profiles = s.profileNames(r, c)
	s.render(w, r, http.StatusOK, views.DelegatePage(s.frame(r, "Delegate"), f, s.accountsOf(r, c)))
}
