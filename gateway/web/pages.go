package web

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/internal/headertext"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// ArtifactCSP is the CSP of artifact bytes: no origin, no script, nothing.
const ArtifactCSP = "default-src 'none'; sandbox"

func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	list, err := core.List(r.Context(), c.actor())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	q := fleetQuery(r)
	s.render(w, r, http.StatusOK, views.FleetPage(s.frame(r, "Fleet"), fleet.FilterBoxes(list, q), q, s.now()))
}

func (s *Server) boxPage(w http.ResponseWriter, r *http.Request) {
	s.boxPageWith(w, r, http.StatusOK, views.BoxTools{})
}

// logText is the log so far as plain text: the console without JavaScript.
func (s *Server) logText(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	ls, err := core.Logs(r.Context(), c.actor(), r.PathValue("box"), 0, false)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	defer ls.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	for {
		ch, err := ls.Next(r.Context())
		if err != nil {
			if !errors.Is(err, io.EOF) {
				Logger(r.Context()).WarnContext(r.Context(), "log text", "err", err)
			}
			return
		}
		if _, err := io.WriteString(w, ch.Text.String()); err != nil {
			return
		}
	}
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	var res fleet.AnswerResult
	var err error
	if r.PostFormValue("mode") == "answer" {
		// The form was rendered for a pending question: answer it (the core
		// refuses when it was answered meanwhile, rather than queue).
		res, err = core.Answer(r.Context(), c.actor(), name, r.PostFormValue("text"))
	} else {
		res, err = core.FollowUp(r.Context(), c.actor(), name, r.PostFormValue("text"), r.PostFormValue("force") == "1")
	}
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	msg := map[string]string{fleet.Answered: "Answer sent; the agent resumed.", fleet.Resumed: "Follow-up sent; a new turn started.",
		fleet.Queued: "The agent is mid-turn: your follow-up waits in the inbox."}[res.Outcome]
	s.done(w, r, views.BoxURL(name, ""), msg)
}

func (s *Server) removeInbox(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		s.htmlError(w, r, http.StatusBadRequest, "inbox item id: want a number")
		return
	}
	if err := core.RemoveInbox(r.Context(), c.actor(), name, id); err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, views.BoxURL(name, ""), "Follow-up removed.")
}

// boxAction is one lifecycle button of the box page.
func (s *Server) boxAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		core, ok := s.core(w, r)
		if !ok {
			return
		}
		c, _ := callerFrom(r.Context())
		name := r.PathValue("box")
		ctx, a := r.Context(), c.actor()
		var err error
		to, msg := views.BoxURL(name, ""), ""
		switch action {
		case "sleep":
			_, err = core.Sleep(ctx, a, name)
			msg = "Box asleep."
		case "wake":
			_, err = core.Wake(ctx, a, name)
			msg = "Box awake."
		case "keep":
			_, err = core.Keep(ctx, a, name, true)
			msg = "Box kept: the sleep TTL no longer applies."
		case "unkeep":
			_, err = core.Keep(ctx, a, name, false)
			msg = "Box no longer kept."
		case "destroy":
			err = core.Destroy(ctx, a, name)
			to, msg = "/", "Box "+name+" destroyed."
		}
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		s.done(w, r, to, msg)
	}
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("box")
	d, err := core.Diff(r.Context(), c.actor(), name)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	html, err := views.Highlight(d.Patch.String())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, http.StatusOK, views.DiffView(d, html))
		return
	}
	s.render(w, r, http.StatusOK, views.DiffPage(s.frame(r, name+" · changes"), name, d, html))
}

// cleanRel is a path under /workspace as the browser names it: relative,
// slash-separated, cleaned ("" for the root). The core confines it too.
func cleanRel(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name, dir := r.PathValue("box"), cleanRel(r.URL.Query().Get("path"))
	arg := dir
	if arg == "" {
		arg = "."
	}
	list, err := core.ReadDir(r.Context(), c.actor(), name, arg)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		s.render(w, r, http.StatusOK, views.FilesView(name, dir, list))
		return
	}
	s.render(w, r, http.StatusOK, views.FilesPage(s.frame(r, name+" · artifacts"), name, dir, list))
}

// artifact serves a file from the box as a download only: its own CSP
// (no origin, sandboxed), attachment, nosniff, and never as HTML.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name, p := r.PathValue("box"), cleanRel(r.URL.Query().Get("path"))
	if p == "" {
		s.htmlError(w, r, http.StatusBadRequest, "path: name a file under /workspace")
		return
	}
	rc, fi, err := core.Artifact(r.Context(), c.actor(), name, p)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Security-Policy", ArtifactCSP)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": downloadName(fi.Name.String())}))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if _, err := io.Copy(w, rc); err != nil {
		Logger(r.Context()).WarnContext(r.Context(), "artifact copy", "box", name, "err", err)
	}
}

// downloadName is a file name safe in a header (mime quotes or encodes it).
func downloadName(n string) string {
	n = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return '_'
		}
		return r
	}, n)
	if n == "" || n == "." || n == ".." {
		return "artifact"
	}
	return n
}

// settingsData gathers the settings page; newToken is shown once.
func (s *Server) settingsData(r *http.Request, newToken string) (views.Settings, error) {
	c, _ := callerFrom(r.Context())
	st := views.Settings{NewToken: newToken, Current: c.Session, Now: s.now()}
	if s.boxes == nil {
		st.AccountsErr = "GitHub accounts are not available: this gateway runs without the fleet core."
	} else if a, err := s.boxes.Accounts(r.Context(), c.actor()); err != nil {
		st.AccountsErr = "Could not list GitHub accounts: " + err.Error()
	} else {
		st.Accounts = a
		if m, err := s.boxes.MCPServers(r.Context(), c.actor()); err != nil {
			st.MCPErr = "Could not list MCP servers: " + err.Error()
		} else {
			st.MCPServers = m
		}
	}
	st.Notify = s.notifyData(r, c)
	st.Presets = s.presetsData(r, c)
	st.Mirrors = s.mirrorsData(r, c)
	st.Profiles = s.profilesData(r, c)
	var err error
	if st.APIKeys, err = s.Identity.APIKeys(r.Context(), c.actor(), c.User.Name); err != nil {
		return st, err
	}
	if st.Sessions, err = s.Identity.WebSessions(r.Context(), c.actor(), c.User.Name); err != nil {
		return st, err
	}
	return st, nil
}

func (s *Server) settings(w http.ResponseWriter, r *http.Request) {
	st, err := s.settingsData(r, "")
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.SettingsPage(s.frame(r, "Settings"), st))
}

func (s *Server) addAccount(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	a, err := core.AddAccount(r.Context(), c.actor(), strings.TrimSpace(r.PostFormValue("name")), strings.TrimSpace(r.PostFormValue("token")),
		strings.TrimSpace(r.PostFormValue("probe")))
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, "/settings", "GitHub account "+a.Name+" added (token "+a.Masked+"): "+a.Identity.Summary(s.now())+".")
}

func (s *Server) accountAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		core, ok := s.core(w, r)
		if !ok {
			return
		}
		c, _ := callerFrom(r.Context())
		name := r.PathValue("name")
		var err error
		msg := ""
		if action == "default" {
			err, msg = core.SetDefaultAccount(r.Context(), c.actor(), name), "Default account: "+name+"."
		} else {
			err, msg = core.RemoveAccount(r.Context(), c.actor(), name), "GitHub account "+name+" removed."
		}
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		s.done(w, r, "/settings", msg)
	}
}

// addMCPServer hands the form to the core: the headers text is split by
// the parser SSH uses too (internal/headertext), every rule is the core's.
// Refused, the page comes back with the core's message and the name and
// URL as typed; the headers are never echoed (not in the page, the flash
// or a URL).
func (s *Server) addMCPServer(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	f := views.MCPForm{Name: strings.TrimSpace(r.PostFormValue("name")), URL: strings.TrimSpace(r.PostFormValue("url"))}
	var m fleet.MCPServer
	headers, err := headertext.Parse(r.PostFormValue("headers"))
	if err == nil {
		m, err = core.AddMCPServer(r.Context(), c.actor(), f.Name, f.URL, headers)
	}
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
		f.Error = err.Error()
		st.MCPForm = f
		s.render(w, r, code, views.SettingsPage(s.frame(r, "Settings"), st))
		return
	}
	msg := "MCP server " + m.Name + " added; boxes reach it at http://" + fleet.GatewayHost + "/mcp/" + m.Name + "."
	s.done(w, r, "/settings", msg)
}

func (s *Server) removeMCPServer(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok {
		return
	}
	c, _ := callerFrom(r.Context())
	name := r.PathValue("name")
	if err := core.RemoveMCPServer(r.Context(), c.actor(), name); err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, "/settings", "MCP server "+name+" removed.")
}

// createKey shows the new API key in the response itself, once: it is
// never put in the session, a redirect or a URL.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	if !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	var ttl time.Duration
	if e := strings.TrimSpace(r.PostFormValue("expires")); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil || d <= 0 {
			s.htmlError(w, r, http.StatusBadRequest, "expires: want a positive duration such as 720h, got "+e)
			return
		}
		ttl = d
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	if name == "" {
		name = "web-" + s.now().UTC().Format("20060102-150405")
	}
	token, _, err := s.Identity.CreateAPIKey(r.Context(), c.actor(), c.User.Name, name, r.PostForm["scope"], ttl)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	st, err := s.settingsData(r, token)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusCreated, views.SettingsPage(s.frame(r, "Settings"), st))
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if err := s.Identity.RevokeAPIKey(r.Context(), c.actor(), c.User.Name, r.PathValue("id")); err != nil {
		s.failPage(w, r, err)
		return
	}
	s.done(w, r, "/settings", "API key "+r.PathValue("id")+" revoked.")
}

func (s *Server) revokeSession(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	id := r.PathValue("id")
	if err := s.Identity.RevokeWebSession(r.Context(), c.actor(), c.User.Name, id); err != nil {
		s.failPage(w, r, err)
		return
	}
	if id == c.Session {
		_ = s.sm.Destroy(r.Context())
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	s.done(w, r, "/settings", "Session revoked.")
}

func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if c.User.Role != keys.RoleAdmin {
		s.htmlError(w, r, http.StatusForbidden, "admins only")
		return
	}
	if s.Audit == nil {
		s.htmlError(w, r, http.StatusServiceUnavailable, "the audit log is not available on this gateway")
		return
	}
	q := r.URL.Query()
	aq := views.AuditQuery{User: q.Get("user"), Since: q.Get("since"), Limit: audit.DefaultLimit}
	f := audit.Filter{User: aq.User, Limit: aq.Limit}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 || n > 1000 {
			s.htmlError(w, r, http.StatusBadRequest, "limit: want 1 to 1000")
			return
		}
		aq.Limit, f.Limit = n, n
	}
	if aq.Since != "" {
		t, err := parseSince(aq.Since, s.now())
		if err != nil {
			s.htmlError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		f.Since = t
	}
	rows, err := s.Audit.List(r.Context(), f)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, views.AuditPage(s.frame(r, "Audit"), aq, rows))
}

// parseSince accepts a duration back from now or a date/time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("since: want a duration such as 24h or a date such as 2026-11-29, got " + v)
}

// accountsOf lists the caller's accounts for the delegate form's hint;
// a failure only hides the hint.
// knownRepos are the repositories the caller's default account reaches, as
// the forge answers within knownReposWait: the delegate form offers them.
// None when the caller has no account or the forge does not answer (the
// form takes any owner/name all the same).
func (s *Server) knownRepos(r *http.Request, c caller) []string {
	if s.boxes == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), knownReposWait)
	defer cancel()
	infos, err := s.boxes.Repos(ctx, c.actor(), "", "")
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(infos))
	for _, i := range infos {
		out = append(out, i.Repo.String())
	}
	return out
}

// knownReposWait bounds how long the delegate form waits for the forge.
const knownReposWait = 3 * time.Second

func (s *Server) accountsOf(r *http.Request, c caller) []accounts.Account {
	if s.boxes == nil {
		return nil
	}
	a, err := s.boxes.Accounts(r.Context(), c.actor())
	if err != nil {
		return nil
	}
	return a
}
