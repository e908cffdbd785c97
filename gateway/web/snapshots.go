package web

import (
	"net/http"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// The box page's checkpoints and fork: each handler one core call
// (Checkpoint, Checkpoints, Rewind, Fork), every rule the core's.

// checkpoint is the box page's form saving a checkpoint (label optional).
func checkpoint(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	cp, err := core.Checkpoint(r.Context(), caller, name, r.PostFormValue("label"))
	if err != nil {
		return "", err
	}
	return "Checkpoint " + cp.ID + " saved.", nil
}

// rewind is a checkpoint's Rewind button.
func rewind(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	id := r.PostFormValue("checkpoint")
	if _, err := core.Rewind(r.Context(), caller, name, id); err != nil {
		return "", err
	}
	return "Rewound to " + id + " and booted again.", nil
}

// removeCheckpoint is a checkpoint's Remove button.
func removeCheckpoint(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	id := r.PathValue("id")
	if err := core.DeleteCheckpoint(r.Context(), caller, name, id); err != nil {
		return "", err
	}
	return "Checkpoint " + id + " removed.", nil
}

// checkpoints lists the box's checkpoints: the panel's fragment for htmx,
// a page otherwise.
func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	list, err := core.Checkpoints(r.Context(), c.actor(), name)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, http.StatusOK, views.CheckpointList(name, list, s.now()))
		return
	}
	s.render(w, r, http.StatusOK, views.CheckpointsPage(s.frame(r, name+" · checkpoints"), name, list, s.now()))
}

// fork is the box page's fork form (task optional); it goes to the new
// box's page.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	b, err := core.Fork(r.Context(), c.actor(), name, r.PostFormValue("task"))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(b.Name, ""), "Forked from "+name+": this box is "+b.Name+", on its own branch.")
}
