package web

import (
	"net/http"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// The box page's forms that change what a box shows or holds: its title
// and its repositories.

// boxForm is a box page form that changes the box through one core call:
// edit makes the call for the caller and says what happened; a refusal
// shows as the failure page of its kind, success goes back to the box page
// with the message.
func (s *Server) boxForm(edit func(r *http.Request, core boxes, caller keys.Actor, name string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		core, ok := s.core(w, r)
		if !ok || !s.form(w, r) {
			return
		}
		c, _ := callerFrom(r.Context())
		name := r.PathValue("box")
		msg, err := edit(r, core, c.actor(), name)
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		s.done(w, r, views.BoxURL(name, ""), msg)
	}
}

// setTitle is the box page's title form.
func setTitle(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	b, err := core.SetTitle(r.Context(), caller, name, r.PostFormValue("title"))
	if err != nil {
		return "", err
	}
	return "Title set to “" + b.Title.String() + "”; the box's name stays " + name + ".", nil
}

// addRepo is the box page's form adding a repository (repo, optional ref).
func addRepo(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	spec := fleet.RepoSpec{Repo: strings.TrimSpace(r.PostFormValue("repo")), Ref: strings.TrimSpace(r.PostFormValue("ref"))}
	b, err := core.AddRepo(r.Context(), caller, name, spec)
	if err != nil {
		return "", err
	}
	if n := len(b.Repos); n > 0 {
		added := b.Repos[n-1]
		return "Added " + added.Name + " in /workspace/" + added.Dir + " on branch " + added.Branch + ".", nil
	}
	return "Repository added.", nil
}

// maxQuery caps the fleet search (?q=): longer text matches no title.
const maxQuery = 200

// fleetQuery is the fleet page's search, ?q= (also on its event stream,
// so live updates keep the filter), cut to maxQuery bytes.
func fleetQuery(r *http.Request) string {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if len(q) > maxQuery {
		q = strings.ToValidUTF8(q[:maxQuery], "")
	}
	return q
}
