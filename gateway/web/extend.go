package web

import (
	"net/http"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/views"
)

// extend is the box page's form pushing the deadline out (by: 30m, 2h).
func (s *Server) extend(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	by, err := fleet.ParseExtension(r.PostFormValue("by"))
	var b fleet.Box
	if err == nil {
		b, err = core.Extend(r.Context(), c.actor(), name, by)
	}
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(name, ""), "Deadline moved to "+b.Deadline.UTC().Format(time.RFC3339)+".")
}

// sizeFields puts the delegate form's memory and vCPUs into req, parsed
// by the core's rules.
func sizeFields(req *fleet.DelegateRequest, f views.DelegateForm) error {
	var err error
	if req.MemoryMiB, err = fleet.ParseMemory(f.Memory); err != nil {
		return err
	}
	req.VCPUs, err = fleet.ParseCPUs(f.CPUs)
	return err
}
