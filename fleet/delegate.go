package fleet

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/hooks"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// Limits of a delegation.
const (
	MaxTaskBytes = 64 << 10
	MaxRepos     = 8
	maxAllow     = 64
)

// checked is a validated delegation, ready to run.
type checked struct {
	req     DelegateRequest
	task    string
	profile profile
	allow   []string
	repos   []clonedRepo
	steps   *progress
	size    boxSize
	// prof is the project profile the delegation uses (hasProf), its max
	// duration read (0: the policy's).
	prof        Profile
	hasProf     bool
	maxDuration time.Duration
}

type clonedRepo struct {
	Repo
	hostDir string // the clone on the host, removed after copying in
}

func (f *Fleet) delegate(ctx context.Context, caller keys.Actor, req DelegateRequest) (Box, error) {
	e := f.entry(caller, "box.delegate", "")
	t0 := time.Now()
	c, err := f.check(ctx, caller, req)
	defer c.cleanup()
	if err != nil {
		e.Detail = "refused"
		f.audit.Finish(ctx, e, err, "denied")
		return Box{}, f.safeErr(err)
	}
	checked := time.Since(t0)
	rec, err := f.start(ctx, caller, c)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	f.log.Info("delegated", "box", rec.Name, "check", checked.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond))
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

func (c *checked) cleanup() {
	if c == nil {
		return
	}
	for _, r := range c.repos {
		if r.hostDir != "" {
			os.RemoveAll(filepath.Dir(r.hostDir))
		}
	}
}

// check validates everything before anything is created: task, profile,
// allow-list, caps, and each repo cloned on the host at its ref.
func (f *Fleet) check(ctx context.Context, caller keys.Actor, req DelegateRequest) (*checked, error) {
	c := &checked{req: req, steps: &progress{report: req.Progress, safe: f.safeErr}}
	if err := f.applyProfile(ctx, caller, c); err != nil {
		return c, err
	}
	req = c.req
	c.task = strings.TrimSpace(req.Task)
	switch {
	case c.task == "":
		return c, fmt.Errorf("empty task: say what the agent should do: %w", ErrInvalid)
	case len(c.task) > MaxTaskBytes:
		return c, fmt.Errorf("task is %d bytes (max %d): %w", len(c.task), MaxTaskBytes, ErrInvalid)
	case !utf8.ValidString(c.task) || strings.ContainsRune(c.task, 0):
		return c, fmt.Errorf("task is not valid UTF-8 text: %w", ErrInvalid)
	}
	if err := checkSetup(req.Setup); err != nil {
		return c, err
	}
	name := req.Agent
	if name == "" {
		name = "claude"
	}
	p, ok := profiles()[name]
	if !ok {
		return c, unknownProfile(name)
	}
	c.profile = p
	allow, err := cleanAllow(req.Allow)
	if err != nil {
		return c, err
	}
	// The caller's default presets join every box they delegate.
	if allow, err = f.withUserPresets(ctx, caller.User, allow); err != nil {
		return c, err
	}
	c.allow = allow
	if len(req.Repos) > MaxRepos {
		return c, fmt.Errorf("%d repos (max %d): %w", len(req.Repos), MaxRepos, ErrInvalid)
	}
	if c.size, err = f.checkCaps(ctx, caller, req); err != nil {
		return c, err
	}
	c.steps.plan(len(req.Repos), strings.TrimSpace(req.Setup) != "")
	if len(c.prof.Install) > 0 {
		c.steps.of++
	}
	seen := map[string]bool{}
	for _, rs := range req.Repos {
		r, err := f.cloneOnHost(ctx, caller, rs, seen, c.steps)
		if err != nil {
			return c, err
		}
		c.repos = append(c.repos, r)
	}
	return c, nil
}

func (f *Fleet) checkCaps(ctx context.Context, caller keys.Actor, req DelegateRequest) (boxSize, error) {
	recs, err := f.records.loadAll(ctx)
	if err != nil {
		return boxSize{}, err
	}
	p := f.policy.get()
	mine, all := 0, 0
	var used boxSize
	for _, r := range recs {
		if r.State == Destroyed {
			continue
		}
		all++
		if r.Owner == caller.User {
			mine++
			if r.State != Failed {
				s := sizeOf(p, r)
				used.memMiB += s.memMiB
				used.vcpus += s.vcpus
			}
		}
	}
	if p.MaxBoxesPerUser > 0 && mine >= p.MaxBoxesPerUser {
		return boxSize{}, fmt.Errorf("you have %d boxes, the most allowed per user (fleet.max_boxes_per_user=%d); remove one with rm: %w", mine, p.MaxBoxesPerUser, ErrLimit)
	}
	if p.MaxBoxesPerHost > 0 && all >= p.MaxBoxesPerHost {
		return boxSize{}, fmt.Errorf("this host runs %d boxes, its maximum (fleet.max_boxes_per_host=%d); try later: %w", all, p.MaxBoxesPerHost, ErrLimit)
	}
	return checkSize(p, req, used)
}

// validRef accepts branch, tag and commit names and nothing an option
// parser or a shell could take for something else.
func validRef(ref string) error {
	if ref == "" {
		return nil
	}
	bad := len(ref) > 200 || ref[0] == '-' || ref[0] == '/' || strings.Contains(ref, "..") ||
		strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".lock") || strings.Contains(ref, "@{")
	for _, r := range ref {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/-", r)
		bad = bad || !ok
	}
	if bad {
		return fmt.Errorf("bad ref %q: want a branch, tag or commit name: %w", ref, ErrInvalid)
	}
	return nil
}

// cloneOnHost clones a repo with the caller's account that reaches it into a
// temporary directory, checks out the ref and starts the box's branch. The
// token travels in git's environment only (accounts.GitEnv): nothing of it
// lands in the clone.
func (f *Fleet) cloneOnHost(ctx context.Context, caller keys.Actor, rs RepoSpec, seen map[string]bool, steps *progress) (clonedRepo, error) {
	repo, err := f.settings.accounts.ResolveRepo(strings.TrimSpace(rs.Repo))
	if err != nil {
		return clonedRepo{}, fmt.Errorf("repo %q: %w: %w", rs.Repo, ErrInvalid, err)
	}
	if err := validRef(rs.Ref); err != nil {
		return clonedRepo{}, err
	}
	full := repo.String()
	if seen[full] {
		return clonedRepo{}, fmt.Errorf("repo %s given twice: %w", full, ErrInvalid)
	}
	seen[full] = true
	acct, token, err := f.settings.accounts.ForRepo(ctx, caller.User, repo)
	if err != nil {
		if errors.Is(err, accounts.ErrNoAccount) {
			// err names the repository and what each account answered.
			return clonedRepo{}, fmt.Errorf("repo %w; add an account that reaches it with `account add`: %w", err, ErrInvalid)
		}
		// The lookup failing is the core unavailable, whatever kind the
		// store gave it: no "no such box" hint for a missing account.
		return clonedRepo{}, fmt.Errorf("repo %s: %w: %v", full, ErrUnavailable, err)
	}
	end := steps.start(StepClone, "cloning "+full)
	r, err := f.cloneAt(ctx, rs, repo, acct, token)
	return r, end(err)
}

// cloneAt clones repo with token and checks out rs.Ref.
func (f *Fleet) cloneAt(ctx context.Context, rs RepoSpec, repo accounts.Repo, acct accounts.Account, token string) (clonedRepo, error) {
	full := repo.String()
	tmp, err := os.MkdirTemp(filepath.Join(f.dataDir, "staging"), "clone-")
	if err != nil {
		if err := os.MkdirAll(filepath.Join(f.dataDir, "staging"), 0o700); err != nil {
			return clonedRepo{}, err
		}
		if tmp, err = os.MkdirTemp(filepath.Join(f.dataDir, "staging"), "clone-"); err != nil {
			return clonedRepo{}, err
		}
	}
	dir := filepath.Join(tmp, repo.Name)
	url := f.settings.accounts.CloneURL(repo)
	env := append(f.settings.accounts.GitEnv(token), f.gitEnv...)
	if out, err := f.git(ctx, "", env, "clone", "--quiet", "--", url, dir); err != nil {
		os.RemoveAll(tmp)
		return clonedRepo{}, fmt.Errorf("repo %s: clone failed: %s: %w", full, out, ErrUnavailable)
	}
	if rs.Ref != "" {
		if _, err := f.git(ctx, dir, nil, "checkout", "--quiet", rs.Ref, "--"); err != nil {
			os.RemoveAll(tmp)
			return clonedRepo{}, fmt.Errorf("repo %s has no branch, tag or commit %q: %w", full, rs.Ref, ErrInvalid)
		}
	}
	base, err := f.git(ctx, dir, nil, "rev-parse", "HEAD")
	if err != nil {
		os.RemoveAll(tmp)
		return clonedRepo{}, fmt.Errorf("repo %s: empty repository? %s: %w", full, base, ErrInvalid)
	}
	return clonedRepo{
		Repo:    Repo{Name: full, Ref: rs.Ref, Base: strings.TrimSpace(base), Account: acct.Name, URL: url, Dir: repo.Name},
		hostDir: dir,
	}, nil
}

// git runs git on the host with a clean, non-interactive environment.
func (f *Fleet) git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + f.dataDir, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false",
		"GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C",
	}, env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// boxName makes a name from the task's first words and a random suffix.
func boxName(task string) string {
	var words []string
	for _, w := range strings.Fields(strings.ToLower(task)) {
		var b strings.Builder
		for _, r := range w {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			}
		}
		if b.Len() > 0 {
			words = append(words, b.String())
		}
		if len(words) == 3 {
			break
		}
	}
	slug := strings.Join(words, "-")
	if len(slug) > 40 {
		slug = strings.Trim(slug[:40], "-")
	}
	if slug == "" {
		slug = "box"
	}
	var suf [3]byte
	_, _ = rand.Read(suf[:])
	return slug + "-" + hex.EncodeToString(suf[:])
}

// start creates the box record, gets a machine, copies the repos in,
// installs the agent's settings and starts the first turn.
func (f *Fleet) start(ctx context.Context, caller keys.Actor, c *checked) (record, error) {
	now := f.now()
	rec := record{
		Name: boxName(c.task), Owner: caller.User, State: Creating, Agent: c.profile.name,
		Task: c.task, Title: DefaultTitle(c.task), Allow: c.allow, Keep: c.req.Keep, Created: now, Updated: now,
		Profile: c.prof.Name, Env: c.prof.Env,
	}
	for _, r := range c.repos {
		r.Branch = "sbx/" + rec.Name
		r.Push = true
		rec.Repos = append(rec.Repos, r.Repo)
	}
	lock := f.locks.get(rec.Name)
	lock.Lock()
	defer lock.Unlock()
	d, err := doc(rec)
	if err != nil {
		return rec, err
	}
	e := f.entry(caller, "box.create", rec.Name)
	e.Detail = fmt.Sprintf("agent=%s repos=%d", rec.Agent, len(rec.Repos))
	if strings.TrimSpace(c.req.Setup) != "" {
		e.Detail += fmt.Sprintf(" setup=%dB", len(c.req.Setup))
	}
	if c.hasProf {
		e.Detail += " profile=" + profileTarget(c.prof.Scope, c.prof.Owner, c.prof.Name)
	}
	if err := f.store.InsertBox(ctx, d, e); err != nil {
		return rec, err
	}
	f.audit.Finish(ctx, e, nil, "")
	f.events.emit(rec, EventState, "")

	fail := func(err error) (record, error) {
		rec.Reason = err.Error()
		f.endFailedStart(context.WithoutCancel(ctx), rec)
		_ = f.records.transition(context.WithoutCancel(ctx), &rec, Failed, caller, "box.fail", rec.Reason)
		return rec, err
	}
	t0 := time.Now()
	vmName, prepared, err := f.acquire(ctx, rec.Name, c.steps, c.size)
	if err != nil {
		return fail(err)
	}
	booted := time.Since(t0)
	rec.VM = vmName
	rec.Started = f.now()
	rec.MemoryMiB, rec.VCPUs = c.size.memMiB, c.size.vcpus
	if c.maxDuration > 0 {
		if err := f.profileDeadline(ctx, vmName, c.maxDuration); err != nil {
			return fail(err)
		}
	}
	if mb, err := f.vm.Get(vmName); err == nil {
		rec.Deadline = mb.Deadline()
		rec.MemoryMiB, rec.VCPUs = mb.Spec.MemoryMiB, mb.Spec.VCPUs
	}
	if err := f.records.save(ctx, rec, audit.Entry{}); err != nil {
		return fail(err)
	}
	for i, r := range c.repos {
		end := c.steps.start(StepCopy, "copying "+r.Name+" in")
		if err := end(f.putRepo(ctx, vmName, r, rec.Repos[i].Branch)); err != nil {
			return fail(err)
		}
	}
	if strings.TrimSpace(c.req.Setup) != "" {
		end := c.steps.start(StepSetup, "running the setup script")
		if err := end(f.runSetup(ctx, rec, c.req.Setup)); err != nil {
			return fail(err)
		}
	}
	if len(c.prof.Install) > 0 {
		end := c.steps.start(StepInstall, "installing dependencies (profile "+c.prof.Name+")")
		if err := end(f.runInstall(ctx, rec, c.prof.Install)); err != nil {
			return fail(err)
		}
	}
	copied := time.Since(t0)
	end := c.steps.start(StepAgent, "starting the agent ("+rec.Agent+")")
	if err := f.setup(ctx, vmName, c.task, prepared); err != nil {
		return fail(end(fmt.Errorf("set up the agent: %w", err)))
	}
	set := time.Since(t0)
	if err := end(f.runs.startTurn(ctx, &rec, c.task, caller, "box.start")); err != nil {
		return fail(err)
	}
	f.log.Info("box started", "box", rec.Name, "machine", booted.Round(time.Millisecond),
		"repos", (copied - booted).Round(time.Millisecond), "setup", (set - copied).Round(time.Millisecond),
		"agent", (time.Since(t0) - set).Round(time.Millisecond))
	return rec, nil
}

// acquire claims a warm machine (already prepared) or boots one, each a
// step. Warm machines have the default size: a box of another size boots
// its own.
func (f *Fleet) acquire(ctx context.Context, name string, steps *progress, size boxSize) (vmName string, prepared bool, err error) {
	if size == sizeOf(f.policy.get(), record{}) {
		if vmName, ok := f.pool.claim(); ok {
			return f.claimed(name, vmName, steps)
		}
	}
	text := "booting"
	if b, ok := f.vm.(vm.BootNoter); ok && b.BootNote() != "" {
		text += " (" + b.BootNote() + ")"
	}
	end := steps.start(StepBoot, text)
	vmName, err = f.pool.boot(ctx, name, size)
	return vmName, false, end(err)
}

// claimed is acquire's step for a warm machine taken from the pool.
func (f *Fleet) claimed(name, vmName string, steps *progress) (string, bool, error) {
	end := steps.start(StepBoot, "taking a warm box")
	f.log.Info("claimed a warm box", "box", name, "vm", vmName)
	f.pool.refill()
	return vmName, true, end(nil)
}

// putRepo starts the box's branch in a host clone, points its remote at
// the gateway and copies it into the box.
func (f *Fleet) putRepo(ctx context.Context, vmName string, r clonedRepo, branch string) error {
	if _, err := f.git(ctx, r.hostDir, nil, "checkout", "--quiet", "-b", branch); err != nil {
		return fmt.Errorf("repo %s: create branch: %w", r.Name, err)
	}
	// With a network path the remote is the gateway's git endpoint, which
	// adds the token outside the box; without one it is the plain URL (no
	// token either way).
	if f.net != nil {
		if _, err := f.git(ctx, r.hostDir, nil, "remote", "set-url", "origin", gitRemote(vmName, r.Name)); err != nil {
			return fmt.Errorf("repo %s: set the remote: %w", r.Name, err)
		}
	}
	if err := f.copyIn(ctx, vmName, r.hostDir, r.Dir); err != nil {
		return fmt.Errorf("repo %s: copy into the box: %w", r.Name, err)
	}
	return nil
}

// copyIn streams a host directory into the box's /workspace/dir as a tar.
func (f *Fleet) copyIn(ctx context.Context, vmName, hostDir, dir string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, hostDir)) }()
	if err := f.vm.MkdirAll(ctx, vmName, dir, 0o755); err != nil {
		pr.Close()
		return err
	}
	err := f.vm.TarIn(ctx, vmName, dir, pr)
	pr.Close()
	return err
}

func writeTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			fh, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, fh)
			fh.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// setupScript prepares the guest for the agent, as root: Claude Code's
// managed settings (its hooks, pinned: the agent user cannot write them,
// and allowManagedHooksOnly drops any hook of user, project or plugin
// settings; the side lane's differ only by SBX_LANE, given on its command
// line), git's identity in the system config
// (read-only to the agent, which has no ~/.gitconfig of ours to rewrite),
// the root-only turn directory.
const setupScript = `set -e
umask 022
mkdir -p /var/lib/sbx/turns ` + managedSettingsDir + `
chmod 755 /var/lib/sbx ` + managedSettingsDir + `
chmod 700 /var/lib/sbx/turns
printf '%s' "$SBX_SETTINGS" > ` + managedSettingsPath + `
chown 0:0 ` + managedSettingsPath + `
chmod 644 ` + managedSettingsPath + `
if command -v git >/dev/null 2>&1; then
  git config --system user.name "sbx agent"
  git config --system user.email agent@sbx.invalid
  git config --system --get-all safe.directory | grep -qx '*' || git config --system --add safe.directory '*'
fi
`

// Where Claude Code reads its managed (policy) settings on Linux: above
// every user, project and command-line setting.
const (
	managedSettingsDir  = "/etc/claude-code"
	managedSettingsPath = managedSettingsDir + "/managed-settings.json"
)

// ownWorkspace gives the workspace's content (the repos just copied in) to
// the agent user, who runs the agent. The top directory (root's, sticky),
// the decision log and the task file (written after) stay root's: the
// guest made them so at boot (guest.ProvisionAgentUser).
var ownWorkspace = `find /workspace -mindepth 1 -maxdepth 1 ! -name .agent.task ! -name ` + hooks.LogFile + ` -exec chown -R ` + agentOwner + ` {} +`

var agentOwner = strconv.Itoa(agent.AgentUID) + ":" + strconv.Itoa(agent.AgentGID)

// setup installs hooks and settings in the guest (unless a warm-pool
// machine already has them), gives the workspace to the agent user and
// writes the task file.
func (f *Fleet) setup(ctx context.Context, vmName, task string, prepared bool) error {
	if !prepared {
		if err := prepare(ctx, f.vm, vmName); err != nil {
			return err
		}
	}
	if out, err := run(ctx, f.vm, vmName, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", ownWorkspace}}); err != nil {
		return fmt.Errorf("give the workspace to the agent user: %w: %s", err, out)
	}
	return f.vm.WriteFile(ctx, vmName, ".agent.task", 0o644, strings.NewReader(task+"\n"))
}

// prepare installs what every box needs whatever its task: the agent's
// managed hook settings, the side lane's, git's identity.
func prepare(ctx context.Context, m Machines, vmName string) error {
	out, err := run(ctx, m, vmName, agent.ExecRequest{
		Argv: []string{"/bin/sh", "-c", setupScript},
		Env: []string{
			"SBX_SETTINGS=" + string(managedSettings()),
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// vmErr maps the vm's errors to the core's.
func vmErr(err error) error {
	switch {
	case errors.Is(err, vm.ErrLimit):
		return fmt.Errorf("%w: %w", ErrLimit, err)
	case errors.Is(err, vm.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, vm.ErrState):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
