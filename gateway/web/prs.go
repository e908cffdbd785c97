package web

import (
	"fmt"
	"net/http"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// The box page's pull-request card: open (push and open), merge, close.
// Each is one call of the core; the card itself comes live over the box
// stream ("prs" events).

func (s *Server) openPR(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	p, err := core.OpenPR(r.Context(), c.actor(), name, fleet.PRRequest{Repo: r.PostFormValue("repo"), Title: r.PostFormValue("title"),
		Body: r.PostFormValue("body"), Base: r.PostFormValue("base"), Draft: r.PostFormValue("draft") == "1"})
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	msg := fmt.Sprintf("Pull request %s#%d opened.", p.Repo, p.Number)
	if !p.Opened {
		msg = fmt.Sprintf("Branch pushed: pull request %s#%d was open already.", p.Repo, p.Number)
	}
	s.done(w, r, views.BoxURL(name, ""), msg)
}

func (s *Server) mergePR(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	method, err := fleet.ParseMergeMethod(r.PostFormValue("method"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	p, err := core.MergePR(r.Context(), c.actor(), name, r.PostFormValue("repo"), method)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(name, ""), fmt.Sprintf("Pull request %s#%d %s.", p.Repo, p.Number, p.State))
}

func (s *Server) closePR(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	p, err := core.ClosePR(r.Context(), c.actor(), name, r.PostFormValue("repo"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(name, ""), fmt.Sprintf("Pull request %s#%d closed.", p.Repo, p.Number))
}
