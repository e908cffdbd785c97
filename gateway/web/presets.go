package web

import (
	"context"
	"net/http"
	"strings"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// presetsCore is the egress presets' part of the core the settings page
// calls (*fleet.Fleet has it; a console without it shows why not).
type presetsCore interface {
	Presets(ctx context.Context, caller keys.Actor) (fleet.PresetsView, error)
	SetDefaultPresets(ctx context.Context, caller keys.Actor, presets []string) ([]string, error)
}

func (s *Server) presetsCore() (presetsCore, bool) {
	p, ok := s.boxes.(presetsCore)
	return p, ok && s.boxes != nil
}

// presetsData fills the settings page's presets section.
func (s *Server) presetsData(r *http.Request, c caller) views.Presets {
	p, ok := s.presetsCore()
	if !ok {
		return views.Presets{Err: "Egress presets are not available: this gateway runs without the fleet core."}
	}
	v, err := p.Presets(r.Context(), c.actor())
	if err != nil {
		return views.Presets{Err: "Could not list the egress presets: " + err.Error()}
	}
	return views.Presets{View: v}
}

// setDefaultPresets hands the caller's default set (names separated by
// spaces or commas) to the core; refused, the page comes back with the
// core's message and the field as typed.
func (s *Server) setDefaultPresets(w http.ResponseWriter, r *http.Request) {
	p, ok := s.presetsCore()
	if !ok {
		s.htmlError(w, r, http.StatusServiceUnavailable, "egress presets are not available on this gateway")
		return
	}
	if !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	typed := r.PostFormValue("presets")
	list, err := p.SetDefaultPresets(r.Context(), c.actor(), strings.Fields(strings.ReplaceAll(typed, ",", " ")))
	if err != nil {
		code := errkind.HTTPStatus(err)
		if code == http.StatusInternalServerError {
			s.failPage(w, r, err)
			return
		}
		st, serr := s.settingsData(r, "")
		if serr != nil {
			s.failPage(w, r, serr)
			return
		}
		st.Presets.Form, st.Presets.FormError = typed, err.Error()
		s.render(w, r, code, views.SettingsPage(s.frame(r, "Settings"), st))
		return
	}
	msg := "Default presets: none."
	if len(list) > 0 {
		msg = "Default presets: " + strings.Join(list, " ") + ". They join every box you delegate from now on."
	}
	s.done(w, r, "/settings#presets", msg)
}
