package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/views"
)

// The delegate form and the delegation's progress. A delegation runs as
// long as its clone, boot and copy-in take, longer than a request should
// hang with nothing to show: the POST starts it and waits only for the
// core's quick refusals (an empty task, a cap: the form comes back with
// the error, as ever), then sends the browser to /delegate/{id}, whose
// steps arrive over SSE as the core reports them (fleet.Step). When the
// agent has started the page moves on to the box; when a step fails it
// says why and shows the form as it was filled. A delegation belongs to
// the user who started it, runs to its end whether or not anyone watches,
// and is kept on this gateway for delegationKeep after it ends.

// delegationKeep is how long an ended delegation's page stays.
const delegationKeep = 10 * time.Minute

// delegation is one delegation a browser started.
type delegation struct {
	id, owner string
	form      views.DelegateForm

	mu      sync.Mutex
	steps   []fleet.Step
	done    bool
	box     fleet.Box
	err     error
	started chan struct{} // closed at the first step or the end
	changed chan struct{} // closed and replaced at every change
}

// delegations are this gateway's delegations by id.
type delegations struct {
	mu sync.Mutex
	m  map[string]*delegation
}

func (ds *delegations) add(owner string, f views.DelegateForm) *delegation {
	var b [16]byte
	_, _ = rand.Read(b[:])
	d := &delegation{id: hex.EncodeToString(b[:]), owner: owner, form: f,
		started: make(chan struct{}), changed: make(chan struct{})}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.m == nil {
		ds.m = map[string]*delegation{}
	}
	ds.m[d.id] = d
	return d
}

// get returns the delegation id if user started it: another user's
// answers like one that does not exist.
func (ds *delegations) get(id, user string) (*delegation, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d, ok := ds.m[id]
	if !ok || d.owner != user {
		return nil, false
	}
	return d, true
}

func (ds *delegations) remove(id string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	delete(ds.m, id)
}

// step is the delegation's fleet.DelegateRequest.Progress: a step's start
// adds it, its end replaces it.
func (d *delegation) step(s fleet.Step) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.steps); n > 0 && d.steps[n-1].N == s.N {
		d.steps[n-1] = s
	} else {
		d.steps = append(d.steps, s)
	}
	d.changedLocked()
}

func (d *delegation) finish(b fleet.Box, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done, d.box, d.err = true, b, err
	d.changedLocked()
}

func (d *delegation) changedLocked() {
	select {
	case <-d.started:
	default:
		close(d.started)
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// result is what the core answered (once the delegation is done).
func (d *delegation) result() (fleet.Box, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.box, d.err
}

// view is the delegation as the page shows it, and a channel closed at
// its next change.
func (d *delegation) view() (views.Delegation, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := views.Delegation{ID: d.id, Form: d.form, Steps: append([]fleet.Step(nil), d.steps...), Done: d.done, Box: d.box.Name}
	if d.err != nil {
		v.Err = d.err.Error()
	}
	return v, d.changed
}

func (s *Server) delegateForm(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	s.render(w, r, http.StatusOK, views.DelegatePage(s.frame(r, "Delegate"), views.DelegateForm{Known: s.knownRepos(r, c), Profiles: s.profileNames(r, c)}, s.accountsOf(r, c)))
}

func (s *Server) delegate(w http.ResponseWriter, r *http.Request) {
	core, ok := s.core(w, r)
	if !ok || !s.form(w, r) {
		return
	}
	c, _ := callerFrom(r.Context())
	f := views.DelegateForm{
		Task: r.PostFormValue("task"), Repos: repoRows(r), Agent: r.PostFormValue("agent"), Allow: r.PostFormValue("allow"),
		Keep: r.PostFormValue("keep") == "1", Setup: strings.ReplaceAll(r.PostFormValue("setup"), "\r\n", "\n"),
		Memory: r.PostFormValue("memory"), CPUs: r.PostFormValue("cpus"), Profile: r.PostFormValue("profile"),
	}
	if op := r.PostFormValue("op"); op != "" {
		s.editRepoRows(w, r, c, f, op)
		return
	}
	req := fleet.DelegateRequest{Task: f.Task, Agent: f.Agent, Allow: strings.Fields(strings.ReplaceAll(f.Allow, ",", " ")), Keep: f.Keep, Setup: f.Setup, Profile: f.Profile}
	if err := sizeFields(&req, f); err != nil {
		s.delegateFailed(w, r, err, f)
		return
	}
	for _, row := range f.Repos {
		// A row left empty is no repository; a half-filled one (a ref
		// alone) goes to the core, which says what is wrong with it.
		if row.Repo != "" || row.Ref != "" {
			req.Repos = append(req.Repos, fleet.RepoSpec{Repo: row.Repo, Ref: row.Ref})
		}
	}
	f.Mentioned = core.MentionedRepos(req.Task, req.Repos)
	d := s.delegations.add(c.User.Name, f)
	req.Progress = d.step
	// The delegation outlives this request (the browser moves on to its
	// page) but not the gateway's core.
	ctx := context.WithoutCancel(r.Context())
	go func() {
		b, err := core.Delegate(ctx, c.actor(), req)
		d.finish(b, err)
		time.AfterFunc(delegationKeep, func() { s.delegations.remove(d.id) })
	}()
	select {
	case <-d.started:
	case <-r.Context().Done():
		return
	}
	v, _ := d.view()
	if !v.Done {
		http.Redirect(w, r, views.DelegationURL(d.id, ""), http.StatusSeeOther)
		return
	}
	s.delegations.remove(d.id)
	if _, err := d.result(); err != nil {
		s.delegateFailed(w, r, err, f)
		return
	}
	s.done(w, r, views.BoxURL(v.Box, ""), "Box "+v.Box+" started.")
}

// delegateFailed shows the form as it was filled and what was wrong.
func (s *Server) delegateFailed(w http.ResponseWriter, r *http.Request, err error, f views.DelegateForm) {
	c, _ := callerFrom(r.Context())
	code := errkind.HTTPStatus(err)
	if code == http.StatusInternalServerError {
		s.failPage(w, r, err)
		return
	}
	p := s.frame(r, "Delegate")
	p.Error = err.Error()
	f.Known = s.knownRepos(r, c)
	f.Profiles = s.profileNames(r, c)
	s.render(w, r, code, views.DelegatePage(p, f, s.accountsOf(r, c)))
}

// delegationOf finds the caller's delegation the path names, or answers
// 404 (another user's is not found either).
func (s *Server) delegationOf(w http.ResponseWriter, r *http.Request, c caller) (*delegation, bool) {
	d, ok := s.delegations.get(r.PathValue("id"), c.User.Name)
	if !ok {
		s.htmlError(w, r, http.StatusNotFound, "no such delegation here: it ended a while ago, or ran through another gateway (see the fleet)")
	}
	return d, ok
}

// delegation is a delegation's page: its steps so far, live until it
// ends; once the box has started it sends the browser on to the box (an
// htmx request from the page's end gets HX-Redirect).
func (s *Server) delegation(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	d, ok := s.delegationOf(w, r, c)
	if !ok {
		return
	}
	v, _ := d.view()
	if v.Done && v.Err == "" {
		to := views.BoxURL(v.Box, "")
		if r.Header.Get("HX-Request") == "true" {
			s.sm.Put(r.Context(), flashKey, "Box "+v.Box+" started.")
			w.Header().Set("HX-Redirect", to)
			w.WriteHeader(http.StatusOK)
			return
		}
		s.done(w, r, to, "Box "+v.Box+" started.")
		return
	}
	s.render(w, r, http.StatusOK, views.DelegationPage(s.frame(r, "Delegate"), v, s.accountsOf(r, c)))
}

// delegationStream sends a delegation's steps ("steps": the whole list,
// again at every change, so a reconnect loses nothing) and its end
// ("done": the outcome), then closes.
func (s *Server) delegationStream(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	d, ok := s.delegationOf(w, r, c)
	if !ok {
		return
	}
	ctx := r.Context()
	out := startSSE(w)
	beat := time.NewTicker(SSEHeartbeat)
	defer beat.Stop()
	for {
		v, changed := d.view()
		body, err := renderString(ctx, views.DelegationSteps(v.Steps))
		if err != nil || out.send("steps", "", body) != nil {
			return
		}
		if v.Done {
			if body, err := renderString(ctx, views.DelegationOutcome(v, s.accountsOf(r, c))); err == nil {
				_ = out.send("done", "", body)
			}
			return
		}
		for waiting := true; waiting; {
			select {
			case <-changed:
				waiting = false
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			case <-beat.C:
				if out.comment() != nil {
					return
				}
			}
		}
	}
}
