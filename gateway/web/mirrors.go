package web

import (
	"context"
	"net/http"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// mirrorsCore is the internal mirrors' part of the core the settings page
// reads (*fleet.Fleet has it; a console without it shows why not).
type mirrorsCore interface {
	Mirrors(ctx context.Context, caller keys.Actor) ([]fleet.MirrorInfo, error)
}

// mirrorsData fills the settings page's mirrors section (read-only).
func (s *Server) mirrorsData(r *http.Request, c caller) views.Mirrors {
	m, ok := s.boxes.(mirrorsCore)
	if !ok || s.boxes == nil {
		return views.Mirrors{Err: "Internal mirrors are not available: this gateway runs without the fleet core."}
	}
	list, err := m.Mirrors(r.Context(), c.actor())
	if err != nil {
		return views.Mirrors{Err: "Could not list the internal mirrors: " + err.Error()}
	}
	return views.Mirrors{List: list}
}
