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

// profilesCore is the project profiles' part of the core the settings page
// and the delegate form call (*fleet.Fleet has it).
type profilesCore interface {
	Profiles(ctx context.Context, caller keys.Actor) (fleet.ProfilesView, error)
	SaveProfile(ctx context.Context, caller keys.Actor, p fleet.Profile) (fleet.Profile, error)
	DeleteProfile(ctx context.Context, caller keys.Actor, name string, site bool) error
	SetRepoProfile(ctx context.Context, caller keys.Actor, repo, profile string) (fleet.RepoDefault, error)
	ClearRepoProfile(ctx context.Context, caller keys.Actor, repo string) (fleet.RepoDefault, error)
}

func (s *Server) profilesCore() (profilesCore, bool) {
	p, ok := s.boxes.(profilesCore)
	return p, ok && s.boxes != nil
}

// profilesData fills the settings page's profiles section; ?profile=NAME
// (&site=1) fills the form with that profile to edit it.
func (s *Server) profilesData(r *http.Request, c caller) views.Profiles {
	p, ok := s.profilesCore()
	if !ok {
		return views.Profiles{Err: "Project profiles are not available: this gateway runs without the fleet core."}
	}
	v, err := p.Profiles(r.Context(), c.actor())
	if err != nil {
		return views.Profiles{Err: "Could not list the profiles: " + err.Error()}
	}
	out := views.Profiles{View: v, Admin: c.User.Role == keys.RoleAdmin}
	if name := r.URL.Query().Get("profile"); name != "" {
		scope := fleet.ScopeUser
		if r.URL.Query().Get("site") == "1" {
			scope = fleet.ScopeSite
		}
		for _, e := range v.Profiles {
			if e.Name == name && e.Scope == scope {
				out.Form = views.FormOf(e.Profile)
			}
		}
	}
	return out
}

// profileNames are the profiles the caller can name at delegate.
func (s *Server) profileNames(r *http.Request, c caller) []string {
	p, ok := s.profilesCore()
	if !ok {
		return nil
	}
	v, err := p.Profiles(r.Context(), c.actor())
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range v.Profiles {
		if !e.Shadowed {
			out = append(out, e.Name)
		}
	}
	return out
}

// profileForm is the start of every profiles form: the core, the form
// read, the caller; false when the answer is already written.
func (s *Server) profileForm(w http.ResponseWriter, r *http.Request) (profilesCore, caller, bool) {
	core, ok := s.profilesCore()
	if !ok {
		s.htmlError(w, r, http.StatusServiceUnavailable, "project profiles are not available on this gateway")
		return nil, caller{}, false
	}
	if !s.form(w, r) {
		return nil, caller{}, false
	}
	c, _ := callerFrom(r.Context())
	return core, c, true
}

// lines splits a textarea into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// saveProfile hands the profile form to the core; refused, the page comes
// back with the core's message and the form as typed.
func (s *Server) saveProfile(w http.ResponseWriter, r *http.Request) {
	core, c, ok := s.profileForm(w, r)
	if !ok {
		return
	}
	f := views.ProfileForm{Name: r.PostFormValue("name"), Image: r.PostFormValue("image"), Setup: strings.ReplaceAll(r.PostFormValue("setup"), "\r\n", "\n"),
		Install: r.PostFormValue("install"), Env: r.PostFormValue("env"), Allow: r.PostFormValue("allow"), Memory: r.PostFormValue("memory"),
		CPUs: r.PostFormValue("cpus"), MaxDuration: r.PostFormValue("max_duration"), Agent: r.PostFormValue("agent"), Site: r.PostFormValue("site") == "1"}
	p := fleet.Profile{Name: f.Name, Image: f.Image, Setup: f.Setup, Install: lines(f.Install), Env: lines(f.Env),
		Allow: strings.Fields(strings.ReplaceAll(f.Allow, ",", " ")), MaxDuration: f.MaxDuration, Agent: f.Agent}
	if f.Site {
		p.Scope = fleet.ScopeSite
	}
	var err error
	if p.MemoryMiB, err = fleet.ParseMemory(f.Memory); err == nil {
		p.VCPUs, err = fleet.ParseCPUs(f.CPUs)
	}
	if err == nil {
		p, err = core.SaveProfile(r.Context(), c.actor(), p)
	}
	if err != nil {
		s.profilesFailed(w, r, err, func(v *views.Profiles) { v.Form, v.FormError = f, err.Error() })
		return
	}
	s.done(w, r, "/settings#profiles", "Profile "+p.Name+" saved ("+p.Scope+").")
}

// deleteProfile removes the caller's profile the path names (site=1: the
// site's).
func (s *Server) deleteProfile(w http.ResponseWriter, r *http.Request) {
	core, c, ok := s.profileForm(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := core.DeleteProfile(r.Context(), c.actor(), name, r.PostFormValue("site") == "1"); err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, "/settings#profiles", "Profile "+name+" removed.")
}

// setRepoProfile sets (an empty profile: clears) a repository's default.
func (s *Server) setRepoProfile(w http.ResponseWriter, r *http.Request) {
	core, c, ok := s.profileForm(w, r)
	if !ok {
		return
	}
	repo, name := r.PostFormValue("repo"), strings.TrimSpace(r.PostFormValue("profile"))
	var d fleet.RepoDefault
	var err error
	if name == "" {
		d, err = core.ClearRepoProfile(r.Context(), c.actor(), repo)
	} else {
		d, err = core.SetRepoProfile(r.Context(), c.actor(), repo, name)
	}
	if err != nil {
		s.profilesFailed(w, r, err, func(v *views.Profiles) { v.DefaultRepo, v.DefaultProfile, v.DefaultError = repo, name, err.Error() })
		return
	}
	msg := d.Repo + " has no default profile."
	if d.Profile != "" {
		msg = "Delegations of " + d.Repo + " use profile " + d.Profile + " unless they name another."
	}
	s.done(w, r, "/settings#profiles", msg)
}

// profilesFailed shows the settings page with the core's refusal in the
// profiles section (fill puts it and the form as typed there).
func (s *Server) profilesFailed(w http.ResponseWriter, r *http.Request, err error, fill func(*views.Profiles)) {
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
	fill(&st.Profiles)
	s.render(w, r, code, views.SettingsPage(s.frame(r, "Settings"), st))
}
