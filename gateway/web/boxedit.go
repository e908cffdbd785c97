package web

import (
	"net/http"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// The box page's forms that change what a box shows or holds: its title
// and its repositories.

// setTitle is the box page's title form.
func (s *Server) setTitle(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	b, err := core.SetTitle(r.Context(), c.actor(), name, r.PostFormValue("title"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(name, ""), "Title set to “"+b.Title.String()+"”; the box's name stays "+name+".")
}

// addRepo is the box page's form adding a repository (repo, optional ref).
func (s *Server) addRepo(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	spec := fleet.RepoSpec{Repo: strings.TrimSpace(r.PostFormValue("repo")), Ref: strings.TrimSpace(r.PostFormValue("ref"))}
	b, err := core.AddRepo(r.Context(), c.actor(), name, spec)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	msg := "Repository added."
	if n := len(b.Repos); n > 0 {
		added := b.Repos[n-1]
		msg = "Added " + added.Name + " in /workspace/" + added.Dir + " on branch " + added.Branch + "."
	}
	s.done(w, r, views.BoxURL(name, ""), msg)
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
