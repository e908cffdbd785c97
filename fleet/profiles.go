package fleet

// Project profiles: named, stored delegation settings (the image, the
// operator's root setup, the agent's dependency install, non-secret
// environment, egress, size, max duration, the agent) a user keeps for
// themselves or an admin shares with everyone (scope site), chosen at
// delegate (DelegateRequest.Profile) or by a repository's default. A
// user's own profile shadows a site one of the same name. Every rule is
// here; fronts only parse their flags and forms into a Profile.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm/agent"
	"sbx.dev/sbx/vm/image"
)

// Profile scopes.
const (
	ScopeUser = "user" // the owner's own
	ScopeSite = "site" // shared by an admin with every user
)

// Limits of a profile.
const (
	MaxProfiles       = 64 // per scope and owner
	maxProfileName    = 64
	MaxInstallCmds    = 16
	maxInstallCmd     = 4 << 10
	MaxProfileEnv     = 32
	maxEnvName        = 64
	maxEnvValue       = 1 << 10
	maxEnvBytes       = 8 << 10
	installTimeout    = 20 * time.Minute
	StepInstall       = "install" // the profile's dependency install, as the agent
	profileNameWanted = "[a-z0-9][a-z0-9._-]{0,63}"
)

// Profile is a project profile as stored and shown. Fronts fill the input
// fields for SaveProfile; the core canonicalizes them.
type Profile struct {
	Name string `json:"name"`
	// Scope is ScopeUser (Owner's) or ScopeSite (every user's).
	Scope string `json:"scope"`
	Owner string `json:"owner,omitempty"`
	// Image is the root filesystem; "" is the gateway's default.
	Image string `json:"image,omitempty"`
	// Setup is a shell script run as root before the agent (as
	// DelegateRequest.Setup; a request's own setup runs after it).
	Setup string `json:"setup,omitempty"`
	// Install are commands run as the agent user in the first
	// repository's directory after setup (dependency install), in order.
	Install []string `json:"install,omitempty"`
	// Env is KEY=VALUE pairs of non-secret environment for the agent.
	Env []string `json:"env,omitempty"`
	// Allow are egress entries and presets, as DelegateRequest.Allow.
	Allow []string `json:"allow,omitempty"`
	// MemoryMiB and VCPUs size the box (0: the default), within the caps.
	MemoryMiB int `json:"memory_mib,omitempty"`
	VCPUs     int `json:"vcpus,omitempty"`
	// MaxDuration is how long the box may run ("2h"; "": the gateway's
	// fleet.max_duration), at most box.max_lifetime.
	MaxDuration string `json:"max_duration,omitempty"`
	// Agent is the agent profile: "claude" or "script" ("": claude).
	Agent   string    `json:"agent,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
}

// RepoDefault is the profile a repository's delegations use by default.
type RepoDefault struct {
	Repo    string `json:"repo"`
	Profile string `json:"profile"`
}

// ProfilesView is what a user sees of the profiles: their own and the
// site's (a site profile that one of theirs shadows is marked), and their
// per-repository defaults.
type ProfilesView struct {
	Profiles []ProfileEntry `json:"profiles"`
	Defaults []RepoDefault  `json:"defaults"`
}

// ProfileEntry is one profile in a list.
type ProfileEntry struct {
	Profile
	// Shadowed: a site profile the caller has one of their own named like.
	Shadowed bool `json:"shadowed,omitempty"`
}

// StoredProfile is a profile's row: its body is the Profile as JSON.
type StoredProfile struct {
	Scope   string
	Owner   string // "" for the site's
	Name    string
	Body    []byte
	Updated time.Time
}

// ProfileStore keeps the profiles and the per-repository defaults.
type ProfileStore interface {
	// ListProfiles returns owner's profiles and the site's.
	ListProfiles(ctx context.Context, owner string) ([]StoredProfile, error)
	// PutProfile creates or replaces a profile, with rec.
	PutProfile(ctx context.Context, p StoredProfile, rec audit.Entry) error
	// DeleteProfile removes a profile (and, for a user's, the owner's
	// repository defaults naming it), with rec; false when there was none.
	DeleteProfile(ctx context.Context, scope, owner, name string, rec audit.Entry) (bool, error)
	// RepoProfiles returns owner's per-repository defaults.
	RepoProfiles(ctx context.Context, owner string) ([]RepoDefault, error)
	// SetRepoProfile sets (profile "": clears) owner's default for repo,
	// with rec.
	SetRepoProfile(ctx context.Context, owner, repo, profile string, at time.Time, rec audit.Entry) error
}

// Profiles lists the caller's profiles, the site's and their per-repository
// defaults.
func (f *Fleet) Profiles(ctx context.Context, caller keys.Actor) (ProfilesView, error) {
	if err := need(caller, keys.RightRead, "profiles"); err != nil {
		return ProfilesView{}, err
	}
	v := ProfilesView{Profiles: []ProfileEntry{}, Defaults: []RepoDefault{}}
	if f.profileStore == nil {
		return v, nil
	}
	list, err := f.loadProfiles(ctx, caller.User)
	if err != nil {
		return ProfilesView{}, f.safeErr(err)
	}
	own := map[string]bool{}
	for _, p := range list {
		if p.Scope == ScopeUser {
			own[p.Name] = true
		}
	}
	for _, p := range list {
		v.Profiles = append(v.Profiles, ProfileEntry{Profile: p, Shadowed: p.Scope == ScopeSite && own[p.Name]})
	}
	defs, err := f.profileStore.RepoProfiles(ctx, caller.User)
	if err != nil {
		return ProfilesView{}, f.safeErr(fmt.Errorf("repository defaults of %s: %w", caller.User, err))
	}
	v.Defaults = append(v.Defaults, defs...)
	return v, nil
}

// Profile returns the profile name resolves to for the caller: their own,
// else the site's.
func (f *Fleet) Profile(ctx context.Context, caller keys.Actor, name string) (Profile, error) {
	if err := need(caller, keys.RightRead, "profile"); err != nil {
		return Profile{}, err
	}
	p, err := f.resolveProfile(ctx, caller.User, name)
	return p, f.safeErr(err)
}

// SaveProfile creates or replaces the profile p.Name in p.Scope ("" is
// ScopeUser; ScopeSite is for admins) after validating every field (an
// ErrInvalid naming the field). Audited (profile.save). It returns the
// profile as stored.
func (f *Fleet) SaveProfile(ctx context.Context, caller keys.Actor, p Profile) (Profile, error) {
	if err := need(caller, keys.RightWrite, "save a profile"); err != nil {
		return Profile{}, err
	}
	if p.Scope == "" {
		p.Scope = ScopeUser
	}
	e := f.entry(caller, "profile.save", profileTarget(p.Scope, caller.User, p.Name))
	deny := func(err error) (Profile, error) {
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return Profile{}, f.safeErr(err)
	}
	if err := profileScope(caller, p.Scope); err != nil {
		return deny(err)
	}
	if f.profileStore == nil {
		err := fmt.Errorf("profiles are not kept on this gateway: %w", ErrUnavailable)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return Profile{}, err
	}
	clean, err := f.cleanProfile(p)
	if err != nil {
		return deny(err)
	}
	clean.Owner = caller.User
	if clean.Scope == ScopeSite {
		clean.Owner = ""
	}
	list, err := f.loadProfiles(ctx, caller.User)
	if err != nil {
		return Profile{}, f.safeErr(err)
	}
	n, exists := 0, false
	for _, q := range list {
		if q.Scope == clean.Scope {
			n++
			exists = exists || q.Name == clean.Name
		}
	}
	if !exists && n >= MaxProfiles {
		return deny(fmt.Errorf("profile %q: %d %s profiles already, the most kept (%d); remove one first: %w", clean.Name, n, clean.Scope, MaxProfiles, ErrLimit))
	}
	clean.Updated = f.now()
	body, err := json.Marshal(clean)
	if err != nil {
		return Profile{}, fmt.Errorf("profile %q: %w", clean.Name, err)
	}
	e.Detail = profileDetail(clean)
	row := StoredProfile{Scope: clean.Scope, Owner: clean.Owner, Name: clean.Name, Body: body, Updated: clean.Updated}
	if err := f.profileStore.PutProfile(ctx, row, e); err != nil {
		err = fmt.Errorf("save profile %q: %w", clean.Name, err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return Profile{}, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	return clean, nil
}

// DeleteProfile removes the caller's profile name, or with site the
// site's (admins only). Audited (profile.delete).
func (f *Fleet) DeleteProfile(ctx context.Context, caller keys.Actor, name string, site bool) error {
	if err := need(caller, keys.RightWrite, "delete a profile"); err != nil {
		return err
	}
	scope, owner := ScopeUser, caller.User
	if site {
		scope, owner = ScopeSite, ""
	}
	e := f.entry(caller, "profile.delete", profileTarget(scope, caller.User, name))
	if err := profileScope(caller, scope); err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return err
	}
	if err := checkProfileName(name); err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return f.safeErr(err)
	}
	if f.profileStore == nil {
		return fmt.Errorf("profiles are not kept on this gateway: %w", ErrUnavailable)
	}
	ok, err := f.profileStore.DeleteProfile(ctx, scope, owner, name, e)
	if err != nil {
		err = fmt.Errorf("delete profile %q: %w", name, err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return f.safeErr(err)
	}
	if !ok {
		return f.safeErr(fmt.Errorf("no %s profile %q: %w", scope, name, ErrNotFound))
	}
	f.audit.Finish(ctx, e, nil, "")
	return nil
}

// SetRepoProfile makes profile (one the caller can use) the default of the
// caller's delegations whose first repository is repo ("owner/name" or a
// URL on the git host). Audited (profile.default).
func (f *Fleet) SetRepoProfile(ctx context.Context, caller keys.Actor, repo, profile string) (RepoDefault, error) {
	return f.setRepoProfile(ctx, caller, repo, profile)
}

// ClearRepoProfile removes the caller's default profile for repo. Audited
// (profile.default).
func (f *Fleet) ClearRepoProfile(ctx context.Context, caller keys.Actor, repo string) (RepoDefault, error) {
	return f.setRepoProfile(ctx, caller, repo, "")
}

func (f *Fleet) setRepoProfile(ctx context.Context, caller keys.Actor, repo, name string) (RepoDefault, error) {
	if err := need(caller, keys.RightWrite, "set a repository's default profile"); err != nil {
		return RepoDefault{}, err
	}
	e := f.entry(caller, "profile.default", strings.TrimSpace(repo))
	deny := func(err error) (RepoDefault, error) {
		f.audit.Finish(ctx, e, err, audit.ResultDenied)
		return RepoDefault{}, f.safeErr(err)
	}
	r, err := f.settings.accounts.ResolveRepo(strings.TrimSpace(repo))
	if err != nil {
		return deny(fmt.Errorf("repo %q: %w: %w", repo, ErrInvalid, err))
	}
	full := r.String()
	e.Target = full
	if f.profileStore == nil {
		return RepoDefault{}, fmt.Errorf("profiles are not kept on this gateway: %w", ErrUnavailable)
	}
	if name != "" {
		if _, err := f.resolveProfile(ctx, caller.User, name); err != nil {
			return deny(err)
		}
		e.Detail = name
	} else {
		e.Detail = "cleared"
	}
	if err := f.profileStore.SetRepoProfile(ctx, caller.User, full, name, f.now(), e); err != nil {
		err = fmt.Errorf("default profile of %s: %w", full, err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return RepoDefault{}, f.safeErr(err)
	}
	f.audit.Finish(ctx, e, nil, "")
	return RepoDefault{Repo: full, Profile: name}, nil
}

// profileScope says whether caller may change profiles of scope.
func profileScope(caller keys.Actor, scope string) error {
	switch scope {
	case ScopeUser:
		return nil
	case ScopeSite:
		if caller.Role != keys.RoleAdmin {
			return fmt.Errorf("site profiles are shared with every user: only an admin changes them: %w", ErrForbidden)
		}
		return nil
	}
	return fmt.Errorf("profile scope %q: want %s or %s: %w", scope, ScopeUser, ScopeSite, ErrInvalid)
}

func profileTarget(scope, user, name string) string {
	if scope == ScopeSite {
		return "site/" + name
	}
	return user + "/" + name
}

// profileDetail is a profile's audit detail: what it sets, no values of
// its environment or scripts.
func profileDetail(p Profile) string {
	var parts []string
	add := func(k, v string) {
		if v != "" && v != "0" {
			parts = append(parts, k+"="+v)
		}
	}
	add("image", p.Image)
	if p.Setup != "" {
		add("setup", fmt.Sprintf("%dB", len(p.Setup)))
	}
	add("install", fmt.Sprint(len(p.Install)))
	var names []string
	for _, kv := range p.Env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	add("env", strings.Join(names, ","))
	add("allow", strings.Join(p.Allow, ","))
	add("memory", fmt.Sprint(p.MemoryMiB))
	add("cpus", fmt.Sprint(p.VCPUs))
	add("max_duration", p.MaxDuration)
	add("agent", p.Agent)
	if len(parts) == 0 {
		return "empty"
	}
	return strings.Join(parts, " ")
}

// loadProfiles reads owner's profiles and the site's, sorted (own first,
// by name).
func (f *Fleet) loadProfiles(ctx context.Context, owner string) ([]Profile, error) {
	rows, err := f.profileStore.ListProfiles(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("profiles of %s: %w", owner, err)
	}
	var out []Profile
	for _, r := range rows {
		var p Profile
		if err := json.Unmarshal(r.Body, &p); err != nil {
			f.log.Warn("profiles: unreadable row skipped", "scope", r.Scope, "owner", r.Owner, "name", r.Name, "err", err)
			continue
		}
		p.Scope, p.Owner, p.Name, p.Updated = r.Scope, r.Owner, r.Name, r.Updated
		out = append(out, p)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope == ScopeUser
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// resolveProfile finds name for owner: their own, else the site's.
func (f *Fleet) resolveProfile(ctx context.Context, owner, name string) (Profile, error) {
	if err := checkProfileName(name); err != nil {
		return Profile{}, err
	}
	if f.profileStore == nil {
		return Profile{}, fmt.Errorf("profile %q: profiles are not kept on this gateway: %w", name, ErrUnavailable)
	}
	list, err := f.loadProfiles(ctx, owner)
	if err != nil {
		return Profile{}, err
	}
	for _, p := range list { // own first
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("no profile %q (see `profile ls`): %w", name, ErrNotFound)
}

// delegateProfile is the profile a delegation uses: the request's, else
// the caller's default for its first repository, else none (ok false).
func (f *Fleet) delegateProfile(ctx context.Context, caller keys.Actor, req DelegateRequest) (Profile, bool, error) {
	name := strings.TrimSpace(req.Profile)
	if name == "" {
		if f.profileStore == nil || len(req.Repos) == 0 {
			return Profile{}, false, nil
		}
		r, err := f.settings.accounts.ResolveRepo(strings.TrimSpace(req.Repos[0].Repo))
		if err != nil {
			return Profile{}, false, nil // cloneOnHost says what is wrong with it
		}
		defs, err := f.profileStore.RepoProfiles(ctx, caller.User)
		if err != nil {
			return Profile{}, false, fmt.Errorf("repository defaults of %s: %w: %v", caller.User, ErrUnavailable, err)
		}
		for _, d := range defs {
			if d.Repo == r.String() {
				name = d.Profile
			}
		}
		if name == "" {
			return Profile{}, false, nil
		}
		p, err := f.resolveProfile(ctx, caller.User, name)
		if errors.Is(err, ErrNotFound) {
			return Profile{}, false, fmt.Errorf("the default profile of %s, %q, no longer exists: choose one with --profile or change the default (profile default %s NAME|--clear): %w",
				r.String(), name, r.String(), ErrInvalid)
		}
		return p, err == nil, err
	}
	p, err := f.resolveProfile(ctx, caller.User, name)
	if errors.Is(err, ErrNotFound) {
		return Profile{}, false, fmt.Errorf("no profile %q (see `profile ls`): %w", name, ErrInvalid)
	}
	return p, err == nil, err
}

// withProfile is the request a profile makes of req: the request's own
// fields win (agent, memory, vCPUs) or add to the profile's (allow, setup
// after the profile's).
func withProfile(p Profile, req DelegateRequest) DelegateRequest {
	if req.Agent == "" {
		req.Agent = p.Agent
	}
	if req.MemoryMiB == 0 {
		req.MemoryMiB = p.MemoryMiB
	}
	if req.VCPUs == 0 {
		req.VCPUs = p.VCPUs
	}
	req.Allow = append(slices.Clone(p.Allow), req.Allow...)
	switch {
	case strings.TrimSpace(p.Setup) == "":
	case strings.TrimSpace(req.Setup) == "":
		req.Setup = p.Setup
	default:
		req.Setup = strings.TrimRight(p.Setup, "\n") + "\n" + req.Setup
	}
	return req
}

// checkProfileName validates a profile's name.
func checkProfileName(name string) error {
	ok := name != "" && len(name) <= maxProfileName
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("profile name %q: want %s: %w", name, profileNameWanted, ErrInvalid)
	}
	return nil
}

// cleanProfile validates every field of p and returns its canonical form.
func (f *Fleet) cleanProfile(p Profile) (Profile, error) {
	out := Profile{Name: strings.TrimSpace(p.Name), Scope: p.Scope}
	if err := checkProfileName(out.Name); err != nil {
		return Profile{}, err
	}
	pol := f.policy.get()
	img, err := checkImage(pol.Spec.Image, p.Image)
	if err != nil {
		return Profile{}, err
	}
	out.Image = img
	if err := checkSetup(p.Setup); err != nil {
		return Profile{}, fmt.Errorf("setup: %w", err)
	}
	out.Setup = p.Setup
	if out.Install, err = CheckInstall(p.Install); err != nil {
		return Profile{}, err
	}
	if out.Env, err = CheckEnv(p.Env); err != nil {
		return Profile{}, err
	}
	if out.Allow, err = cleanAllow(p.Allow); err != nil {
		return Profile{}, err
	}
	if p.MemoryMiB < 0 || p.MemoryMiB > 0 && p.MemoryMiB < MinBoxMemoryMiB {
		return Profile{}, fmt.Errorf("memory %d MiB: a box needs at least %d MiB: %w", p.MemoryMiB, MinBoxMemoryMiB, ErrInvalid)
	}
	if p.VCPUs < 0 || p.VCPUs > MaxBoxVCPUs {
		return Profile{}, fmt.Errorf("cpus %d: want 1 to %d: %w", p.VCPUs, MaxBoxVCPUs, ErrInvalid)
	}
	if pol.MaxBoxMemoryMiB > 0 && p.MemoryMiB > pol.MaxBoxMemoryMiB {
		return Profile{}, fmt.Errorf("memory %d MiB is over the most a box may have, %d MiB (box.max_memory_mib): %w", p.MemoryMiB, pol.MaxBoxMemoryMiB, ErrLimit)
	}
	if pol.MaxBoxVCPUs > 0 && p.VCPUs > pol.MaxBoxVCPUs {
		return Profile{}, fmt.Errorf("cpus %d is over the most a box may have, %d (box.max_cpus): %w", p.VCPUs, pol.MaxBoxVCPUs, ErrLimit)
	}
	out.MemoryMiB, out.VCPUs = p.MemoryMiB, p.VCPUs
	if s := strings.TrimSpace(p.MaxDuration); s != "" {
		d, err := profileDuration(pol, s)
		if err != nil {
			return Profile{}, err
		}
		out.MaxDuration = d.String()
	}
	if p.Agent != "" {
		if _, ok := profiles()[p.Agent]; !ok {
			return Profile{}, fmt.Errorf("agent: %w", unknownProfile(p.Agent))
		}
		out.Agent = p.Agent
	}
	return out, nil
}

// profileDuration reads a profile's max duration, at most box.max_lifetime.
func profileDuration(pol Policy, s string) (time.Duration, error) {
	d, err := ParseExtension(s)
	if err != nil {
		return 0, fmt.Errorf("max duration: %w", err)
	}
	if d < time.Minute {
		return 0, fmt.Errorf("max duration %v: want at least 1m: %w", d, ErrInvalid)
	}
	if pol.MaxLifetime > 0 && d > pol.MaxLifetime {
		return 0, fmt.Errorf("max duration %v is longer than a box may live, %v (box.max_lifetime): %w", d, pol.MaxLifetime, ErrLimit)
	}
	return d, nil
}

// checkImage validates a profile's image against the images this gateway
// boots (today the one of vm.image): "" is that default.
func checkImage(known, name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", nil
	}
	if known == "" {
		known = image.Agent
	}
	if name != known {
		return "", fmt.Errorf("image %q: this gateway boots only the image %q (vm.image); leave image empty for it: %w", name, known, ErrInvalid)
	}
	return name, nil
}

// CheckInstall validates a profile's install commands (each one line of
// shell run as the agent user), returning them trimmed, empty ones dropped.
func CheckInstall(cmds []string) ([]string, error) {
	var out []string
	for i, c := range cmds {
		c = strings.TrimSpace(c)
		switch {
		case c == "":
			continue
		case len(c) > maxInstallCmd:
			return nil, fmt.Errorf("install command %d is %d bytes (max %d): %w", i+1, len(c), maxInstallCmd, ErrInvalid)
		case !utf8.ValidString(c) || strings.ContainsAny(c, "\x00\r\n"):
			return nil, fmt.Errorf("install command %d: want one line of UTF-8 text (no NUL or newline): %w", i+1, ErrInvalid)
		}
		out = append(out, c)
	}
	if len(out) > MaxInstallCmds {
		return nil, fmt.Errorf("%d install commands (max %d): %w", len(out), MaxInstallCmds, ErrInvalid)
	}
	return out, nil
}

// secretWords are the parts of a variable name that say it carries a
// secret: such values belong in an account or an MCP server's sealed
// headers, never in a profile anyone with the profile can read.
var secretWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "PRIVATE", "COOKIE", "SESSION", "AUTH"}

// reservedEnv are variables sbx sets itself in a box (agentEnv, netEnv,
// managedEnv) or that change how every program in it runs.
var reservedEnv = []string{"HOME", "PATH", "USER", "LOGNAME", "SHELL", "PWD", "TERM", "CI", "DISABLE_AUTOUPDATER",
	"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "IFS", "ENV", "BASH_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"NODE_OPTIONS", "NODE_EXTRA_CA_CERTS", "PYTHONSTARTUP", "PYTHONPATH", "PERL5OPT", "RUBYOPT"}

// reservedPrefixes are prefixes of variables sbx or its agent own.
var reservedPrefixes = []string{"SBX_", "CLAUDE_", "ANTHROPIC_", "LD_", "GIT_", "SSH_", "DYLD_"}

// CheckEnv validates a profile's environment: KEY=VALUE pairs whose names
// are [A-Z_][A-Z0-9_]*, not secret-bearing nor set by sbx, with values of
// one line of text; bounded in count and size. It returns them as given,
// a name given twice refused.
func CheckEnv(env []string) ([]string, error) {
	if len(env) > MaxProfileEnv {
		return nil, fmt.Errorf("env: %d variables (max %d): %w", len(env), MaxProfileEnv, ErrInvalid)
	}
	seen := map[string]bool{}
	total := 0
	out := []string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("env %q: want KEY=VALUE: %w", clip(kv, 40), ErrInvalid)
		}
		if err := checkEnvName(k); err != nil {
			return nil, err
		}
		switch {
		case seen[k]:
			return nil, fmt.Errorf("env %s given twice: %w", k, ErrInvalid)
		case len(v) > maxEnvValue:
			return nil, fmt.Errorf("env %s: value is %d bytes (max %d): %w", k, len(v), maxEnvValue, ErrInvalid)
		case !utf8.ValidString(v) || strings.ContainsAny(v, "\x00\r\n"):
			return nil, fmt.Errorf("env %s: value must be one line of UTF-8 text (no NUL or newline): %w", k, ErrInvalid)
		}
		seen[k] = true
		total += len(kv)
		if total > maxEnvBytes {
			return nil, fmt.Errorf("env: %d bytes in all (max %d): %w", total, maxEnvBytes, ErrInvalid)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

func checkEnvName(k string) error {
	ok := k != "" && len(k) <= maxEnvName
	for i := 0; ok && i < len(k); i++ {
		c := k[i]
		ok = c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9'
	}
	if !ok {
		return fmt.Errorf("env name %q: want [A-Z_][A-Z0-9_]* (at most %d characters): %w", clip(k, 70), maxEnvName, ErrInvalid)
	}
	flat := strings.ReplaceAll(k, "_", "")
	for _, w := range secretWords {
		if strings.Contains(flat, w) {
			return fmt.Errorf("env %s looks like it carries a secret (%s): a profile is not secret; give credentials through an account or an MCP server's sealed headers: %w", k, w, ErrInvalid)
		}
	}
	if strings.HasSuffix(k, "_KEY") || k == "KEY" || strings.HasPrefix(k, "KEY_") || strings.Contains(k, "_KEY_") {
		return fmt.Errorf("env %s looks like it carries a secret (KEY): a profile is not secret; give credentials through an account or an MCP server's sealed headers: %w", k, ErrInvalid)
	}
	if slices.Contains(reservedEnv, k) {
		return fmt.Errorf("env %s is set by sbx or changes how every program runs: it cannot be set by a profile: %w", k, ErrInvalid)
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(k, p) {
			return fmt.Errorf("env %s: names starting %s are sbx's or its agent's: %w", k, p, ErrInvalid)
		}
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// runInstall runs the profile's install commands as the agent user in the
// first repository's directory (the workspace without one), with the
// agent's environment, one after another, their output into the box's
// log. A non-zero exit, or a step that outlives installTimeout, fails the
// box.
func (f *Fleet) runInstall(ctx context.Context, rec record, cmds []string) error {
	if len(cmds) == 0 {
		return nil
	}
	// The workspace becomes the agent's before its install writes to it
	// (setup does it again for what comes after).
	if out, err := run(ctx, f.vm, rec.VM, agent.ExecRequest{Argv: []string{"/bin/sh", "-c", ownWorkspace}}); err != nil {
		return fmt.Errorf("give the workspace to the agent user: %w: %s", err, out)
	}
	dir := ""
	if len(rec.Repos) > 0 {
		dir = rec.Repos[0].Dir
	}
	return f.runLogged(ctx, rec, "install", agent.AgentUser, installTimeout, agent.ExecRequest{
		User: agent.AgentUser, Dir: dir,
		Argv: []string{"/bin/sh", "-c", `exec 2>&1; exec /bin/sh -ec "$1"`, "install", strings.Join(cmds, "\n")},
		Env:  f.runs.agentEnv(rec),
	})
}

// applyProfile resolves the delegation's profile (explicit, else the
// first repository's default) and merges it into c.req, re-checking what
// may have changed since it was saved (the image, the max duration against
// box.max_lifetime, its install commands and environment).
func (f *Fleet) applyProfile(ctx context.Context, caller keys.Actor, c *checked) error {
	p, ok, err := f.delegateProfile(ctx, caller, c.req)
	if err != nil || !ok {
		return err
	}
	pol := f.policy.get()
	if _, err := checkImage(pol.Spec.Image, p.Image); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	if p.Install, err = CheckInstall(p.Install); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	if p.Env, err = CheckEnv(p.Env); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	if p.MaxDuration != "" {
		if c.maxDuration, err = profileDuration(pol, p.MaxDuration); err != nil {
			return fmt.Errorf("profile %q: %w", p.Name, err)
		}
	}
	c.prof, c.hasProf = p, true
	c.req = withProfile(p, c.req)
	return nil
}

// profileDeadline gives a just-acquired machine the profile's max
// duration, counted from now (a warm machine started earlier).
func (f *Fleet) profileDeadline(ctx context.Context, vmName string, d time.Duration) error {
	mb, err := f.vm.Get(vmName)
	if err != nil {
		return fmt.Errorf("profile max duration: %w", vmErr(err))
	}
	if !mb.Started.IsZero() {
		d += f.now().Sub(mb.Started)
	}
	if _, err := f.vm.SetMaxDuration(ctx, vmName, d); err != nil {
		return fmt.Errorf("profile max duration: %w", vmErr(err))
	}
	return nil
}
