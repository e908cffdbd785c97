package web

import (
	"net/http"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// The box page's tools beyond the lifecycle buttons: the side question
// (SSH `ask`) and the allow-list editor (SSH `allow`). Every rule is the
// core's (fleet.Ask, fleet.EditAllow); a refusal comes back in the panel
// with the status its kind deserves, and what was typed is kept.

// ask runs a side question and shows its answer: the panel alone to htmx,
// the whole box page otherwise. The core bounds its length (10 minutes).
func (s *Server) ask(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	q := views.SideQuestion{Question: r.PostFormValue("question"), Fresh: r.PostFormValue("fresh") == "1"}
	status := http.StatusOK
	answer, err := core.Ask(r.Context(), c.actor(), name, q.Question, q.Fresh)
	if err != nil {
		code, msg := shown(r, err)
		if code == http.StatusNotFound || code == http.StatusInternalServerError {
			s.htmlError(w, r, code, msg)
			return
		}
		q.Error, status = msg, code
	} else {
		q.Answer = answer.String()
		if strings.TrimSpace(q.Answer) == "" {
			q.Answer = "(the side session gave no answer)"
		}
	}
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, status, views.SideQuestionPanel(name, q))
		return
	}
	s.boxPageWith(w, r, status, views.BoxTools{Ask: q})
}

// setAllow edits the box's egress allow-list: "remove" takes one entry
// out, "add" (space or comma separated) puts entries in; the core checks
// every entry and stores the list. Done, the box page says what it is now.
func (s *Server) setAllow(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	e := views.AllowEdit{Add: strings.TrimSpace(r.PostFormValue("add"))}
	var remove []string
	if d := strings.TrimSpace(r.PostFormValue("remove")); d != "" {
		remove = []string{d}
	}
	nb, err := core.EditAllow(r.Context(), c.actor(), name, strings.Fields(strings.ReplaceAll(e.Add, ",", " ")), remove)
	if err != nil {
		code, msg := shown(r, err)
		if code == http.StatusNotFound || code == http.StatusInternalServerError {
			s.htmlError(w, r, code, msg)
			return
		}
		e.Error = msg
		s.boxPageWith(w, r, code, views.BoxTools{Allow: e})
		return
	}
	msg := "Box " + name + " may reach no extra domain."
	if len(nb.Allow) > 0 {
		msg = "Box " + name + " may reach: " + strings.Join(nb.Allow, " ") + "."
	}
	s.done(w, r, views.BoxURL(name, ""), msg)
}

// boxPageWith is the box page, with a box tool's outcome filled in when
// it answers that tool's POST.
func (s *Server) boxPageWith(w http.ResponseWriter, r *http.Request, status int, t views.BoxTools) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	b, err := core.Get(r.Context(), c.actor(), name)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	inbox, err := core.Inbox(r.Context(), c.actor(), name)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	var repos []fleet.RepoSpec
	for _, x := range b.Repos {
		repos = append(repos, fleet.RepoSpec{Repo: x.Name})
	}
	mentioned := core.MentionedRepos(b.Task.String(), repos)
	s.render(w, r, status, views.BoxPageWith(s.frame(r, b.Name), b, inbox, mentioned, s.now(), t))
}
