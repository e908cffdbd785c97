package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
)

// addRepo puts one more repository into a running box, with delegate's
// checks and delegate's way: the repo and ref are checked and cloned on
// the host with the caller's account that reaches it (the token only in
// git's environment), the box's branch sbx/BOX is started, the remote
// points at the gateway's git endpoint and the copy goes in under
// /workspace. The box's record then lists it with Push, so the box network
// (NetGrant) forwards it and accepts pushes to that one branch only.
func (f *Fleet) addRepo(ctx context.Context, caller keys.Actor, name string, rs RepoSpec) (Box, error) {
	e := f.entry(caller, "box.repo.add", name)
	e.Detail = strings.TrimSpace(rs.Repo)
	if rs.Ref != "" {
		e.Detail += "@" + rs.Ref
	}
	fail := func(err error) (Box, error) {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return Box{}, f.safeErr(err)
	}
	repo, err := f.settings.accounts.ResolveRepo(strings.TrimSpace(rs.Repo))
	if err != nil {
		return Box{}, f.safeErr(fmt.Errorf("repo %q: %w: %w", rs.Repo, ErrInvalid, err))
	}
	if err := validRef(rs.Ref); err != nil {
		return Box{}, f.safeErr(err)
	}
	// The cheap refusals first, then the clone without the box's lock (it
	// may take a while), then everything again under the lock.
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	if err := canAddRepo(rec, repo.String(), repo.Name); err != nil {
		return fail(err)
	}
	// The box's git path adds its owner's token (NetGrant), so the repo
	// must be one the owner's accounts reach, whoever adds it (an admin).
	owner := caller
	owner.User = rec.Owner
	r, err := f.cloneOnHost(ctx, owner, rs, map[string]bool{}, &progress{safe: f.safeErr})
	defer (&checked{repos: []clonedRepo{r}}).cleanup()
	if err != nil {
		return fail(err)
	}
	rec, lock, err := f.locks.lockBox(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	defer lock.Unlock()
	if err := canAddRepo(rec, r.Name, r.Dir); err != nil {
		return fail(err)
	}
	if _, err := f.machine(ctx, caller, &rec); err != nil {
		return fail(err)
	}
	if _, err := f.vm.Stat(ctx, rec.VM, r.Dir); err == nil {
		return fail(fmt.Errorf("box %q already has /workspace/%s: %w", name, r.Dir, ErrConflict))
	} else if !errors.Is(fileErr(err), ErrNotFound) {
		return fail(fmt.Errorf("box %q: look for /workspace/%s: %w", name, r.Dir, err))
	}
	r.Branch, r.Push = "sbx/"+rec.Name, true
	if err := f.putRepo(ctx, rec.VM, r, r.Branch); err != nil {
		return fail(err)
	}
	// The agent user works on the repo, as on the ones delegate put in.
	if out, err := run(ctx, f.vm, rec.VM, agent.ExecRequest{Argv: []string{"chown", "-R", agentOwner, filepath.Join("/workspace", r.Dir)}}); err != nil {
		return fail(fmt.Errorf("give /workspace/%s to the agent user: %w: %s", r.Dir, err, out))
	}
	rec.Repos = append(rec.Repos, r.Repo)
	if err := f.records.save(ctx, rec, e); err != nil {
		return fail(err)
	}
	_ = f.logs.append(rec.Name, fmt.Sprintf("── %s added %s in /workspace/%s (branch %s) ──\n", caller.User, r.Name, r.Dir, r.Branch))
	f.events.emit(rec, EventState, "box.repo.add")
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// canAddRepo refuses a repo the box already has, a directory another of
// its repos uses, and a box at delegate's limit of repos.
func canAddRepo(rec record, full, dir string) error {
	for _, r := range rec.Repos {
		if strings.EqualFold(r.Name, full) {
			return fmt.Errorf("box %q already has %s (in /workspace/%s): %w", rec.Name, r.Name, r.Dir, ErrConflict)
		}
		if r.Dir == dir {
			return fmt.Errorf("box %q already has /workspace/%s (for %s): %w", rec.Name, dir, r.Name, ErrConflict)
		}
	}
	if len(rec.Repos) >= MaxRepos {
		return fmt.Errorf("box %q has %d repos (max %d): %w", rec.Name, len(rec.Repos), MaxRepos, ErrLimit)
	}
	return nil
}
