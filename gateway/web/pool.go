package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// poolCore is the warm pool's part of the core the pool page calls
// (*fleet.Fleet has it; a console without it says so). Who may read and
// set the pool is the core's rule: the page shows its refusal.
type poolCore interface {
	Pool(ctx context.Context, caller keys.Actor) (fleet.PoolStatus, error)
	SetPool(ctx context.Context, caller keys.Actor, n int) (fleet.PoolStatus, error)
}

func (s *Server) pooler(w http.ResponseWriter, r *http.Request) (poolCore, bool) {
	p, ok := s.boxes.(poolCore)
	if !ok || s.boxes == nil {
		s.htmlError(w, r, http.StatusServiceUnavailable, "the warm pool is not available: this gateway runs without the fleet core")
		return nil, false
	}
	return p, true
}

// poolPage shows the warm pool and the form that sets its target.
func (s *Server) poolPage(w http.ResponseWriter, r *http.Request) {
	s.renderPool(w, r, http.StatusOK, views.PoolForm{})
}

// renderPool renders the pool page at code with the form as given; a
// refusal to read the pool (not an admin) is the page's answer.
func (s *Server) renderPool(w http.ResponseWriter, r *http.Request, code int, f views.PoolForm) {
	p, ok := s.pooler(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	st, err := p.Pool(r.Context(), c.actor())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, code, views.PoolPage(s.frame(r, "Warm pool"), st, f))
}

// setPool hands the typed size to the core. Refused (not a number, out of
// the core's range), the page comes back with the message, the size as
// typed and the status of the error's kind; not an admin, the core's
// Forbidden is the answer.
func (s *Server) setPool(w http.ResponseWriter, r *http.Request) {
	p, ok := s.pooler(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	typed := strings.TrimSpace(r.PostFormValue("size"))
	n, err := strconv.Atoi(typed)
	if err != nil {
		// No whole number: it never reaches the core, which takes an int.
		err = fmt.Errorf("size %q: want a whole number such as 2: %w", typed, errkind.Invalid)
	} else {
		var st fleet.PoolStatus
		if st, err = p.SetPool(r.Context(), c.actor(), n); err == nil {
			s.done(w, r, "/pool", fmt.Sprintf("Warm pool target set to %d: %d ready, %d booting.", st.Target, st.Ready, st.Booting))
			return
		}
	}
	code := errkind.HTTPStatus(err)
	if code != http.StatusBadRequest {
		// Forbidden, or a failure of no kind: nothing to re-offer.
		s.failPage(w, r, err)
		return
	}
	s.renderPool(w, r, code, views.PoolForm{Size: typed, Error: err.Error()})
}
