// Package fleet is the core every front calls: boxes with owners, the runs
// of an agent inside them, their live logs, questions, follow-ups, diffs and
// lifecycle. It knows no front and renders nothing (see api.go for its whole
// surface); it reaches machines only through Machines (the one vm.Manager,
// whichever backend) and the database only through Store.
//
// Several gateways may share one database and one cluster (Config.Cluster,
// cluster.go): they see the same boxes, relay their events to each other,
// act once on what all of them notice, and hand turns over when one dies.
//
// Every call takes the caller (keys.Actor) and resolves the box through
// them; there is no method that acts on a bare box name. Everything that
// leaves a box passes the one redactor before a front sees it.
//
// Fleet is the caller-checked front door (api.go) over parts, each a small
// struct that owns its state, in the file named for it: records (load,
// save, transition), locks (the way to a box: through the caller, under its
// lock), events (changes to subscribers), logs (streams, positions, the
// cluster mirror), runs (start and follow the agent's turns), pool (warm
// machines), settings (accounts, MCP servers, allow-lists), files (stat,
// readdir, artifacts, diff), net.go's grants (the box network's view) and
// cluster.go's leases. What spans parts is Fleet's: delegate.go (a new
// box), actions.go (what a caller does in a box), lifecycle.go (sleep,
// wake, destroy, the timers, recovery), prs.go (a box's branches as pull
// requests on the forge, and the watcher of the open ones).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/fleet/forge"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm"
)

// Policy is the lifecycle and the caps. Zero durations disable a timer;
// zero caps mean unlimited.
type Policy struct {
	// MaxDuration is a box's wall-time limit from its first start, sleeps
	// included; then its machine is killed and the box fails.
	MaxDuration time.Duration
	// IdleSleep puts a box to sleep after this long without agent output
	// (and no turn running).
	IdleSleep time.Duration
	// SleepTTL destroys a sleeping box this long after it went to sleep,
	// unless it is kept.
	SleepTTL time.Duration
	// MaxBoxesPerUser and MaxBoxesPerHost cap live boxes (not destroyed).
	MaxBoxesPerUser int
	MaxBoxesPerHost int
	// WarmPool is how many pre-booted boxes wait to be claimed.
	WarmPool int
	// Spec is what new boxes are created with (image, memory, vCPUs,
	// workspace size).
	Spec vm.Spec
	// MaxBoxMemoryMiB and MaxBoxVCPUs cap the size one box may ask for
	// (DelegateRequest.MemoryMiB, VCPUs); MaxUserMemoryMiB and MaxUserVCPUs
	// the sum over a user's live boxes. 0: no cap (the host's caps, in
	// vm.Config, still hold).
	MaxBoxMemoryMiB  int
	MaxBoxVCPUs      int
	MaxUserMemoryMiB int
	MaxUserVCPUs     int
	// MaxLifetime caps a box's deadline, extensions (Extend) included,
	// from its machine's first start. 0: no cap.
	MaxLifetime time.Duration
	// TickEvery is how often lifecycle timers are checked (default 5 s).
	TickEvery time.Duration
	// PRPollEvery is how often the open pull requests are asked about on
	// the forge (default 30 s; one gateway of a cluster asks).
	PRPollEvery time.Duration
}

// Config wires the core.
type Config struct {
	Store    Store
	VM       Machines
	Accounts *accounts.Service
	Audit    *audit.Log
	Redactor *redact.Redactor
	// DataDir holds the logs (<DataDir>/logs/<box>.log).
	DataDir string
	Policy  Policy
	// Now is the clock (tests inject one); default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// GitEnv is extra environment for host-side git (tests: GIT_SSL_*).
	GitEnv []string
	// Network gives boxes their one network path; nil: no network.
	Network Network
	// MCP keeps users' MCP servers, their headers sealed by Sealer; nil:
	// no MCP servers.
	MCP    MCPStore
	Sealer Sealer
	// PrivateUpstreams are the private addresses an MCP server may have
	// (the operator's net.private_upstreams, which the box network trusts
	// too); an MCP server at any other forbidden address is refused.
	PrivateUpstreams []netpolicy.Trust
	// Cluster, when set, is the database this gateway shares with others
	// (see Cluster); ID names this gateway among them (unique per
	// process). nil: the only gateway.
	Cluster Cluster
	ID      string
	// Notify keeps users' notification channels (sealed by Sealer) and
	// their outbox; nil: no notifications. Notifications tunes them.
	Notify        NotifyStore
	Notifications NotifyConfig
	// Forge is the git host's API (git.kind at git.host) the pull
	// requests and repository lists go through; nil: none (those calls
	// are Unavailable).
	Forge forge.Forge
	// Presets keeps users' default egress presets; nil: none (setting
	// them is Unavailable).
	Presets PresetStore
	// SitePresets are the egress presets every box's grant holds (the
	// configuration key net.default_presets: "@npm" or "npm"); an
	// unknown name stops New.
	SitePresets []string
	// Mirrors keeps the internal package mirrors admins add; nil: admins
	// cannot add any (adding is Unavailable).
	Mirrors MirrorStore
	// SiteMirrors are the configuration's mirrors (net.mirrors: "NAME
	// HOST[:PORT] RANGE,…"); a bad one stops New.
	SiteMirrors []string
	// Profiles keeps the project profiles and the per-repository
	// defaults; nil: none (saving one is Unavailable).
	Profiles ProfileStore
}

// Fleet is the core: the caller-checked front door (api.go) over parts
// that each own their state. Safe for concurrent use; operations on one box
// are serialised by the box's lock.
type Fleet struct {
	store   Store
	vm      Machines
	audit   *audit.Log
	red     *redact.Redactor
	dataDir string
	now     func() time.Time
	log     *slog.Logger
	gitEnv  []string
	net     Network

	bg       *background // the core's own goroutines
	policy   *livePolicy
	leases   *leases   // cluster.go: who acts on what every gateway notices
	events   *events   // events.go: the boxes' changes to subscribers
	records  *records  // records.go: load, save, transition
	locks    *locks    // locks.go: each box's lock
	logs     *logs     // logs.go: the boxes' logs, streams, positions, mirror
	runs     *runs     // runs.go: start and follow the agent's turns
	pool     *pool     // pool.go: the warm machines
	settings *settings // settings.go: accounts, MCP servers, allow-lists
	files    *files    // files.go: stat, readdir, artifacts, diff
	grants   *grants   // net.go: what a machine's network path may reach
	notify   *notifier // notify*.go: channels, the outbox, the dispatcher
	previews *previews // preview.go: the preview links spent
	forge    forge.Forge
	presets  PresetStore // presets.go: users' default presets
	mirrors  *mirrors    // mirrors.go: internal package mirrors
	// profileStore keeps the project profiles (profiles.go).
	profileStore ProfileStore
	// sitePresets are the presets in every box's grant.
	sitePresets []string
}

// background is the core's own work (turns followed, mirrors, the pool,
// timers): it lives until Close.
type background struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// every runs fn each period until Close, in the group Close waits for.
func (b *background) every(period time.Duration, fn func(context.Context)) {
	b.wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-b.ctx.Done():
				return
			case <-t.C:
				fn(b.ctx)
			}
		}
	})
}

// livePolicy is the Policy in force; SetPool changes its warm pool's size.
type livePolicy struct {
	mu sync.Mutex
	p  Policy
}

func (l *livePolicy) get() Policy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p
}

func (l *livePolicy) setWarmPool(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.WarmPool = n
}

// New starts the core over a started vm.Manager: it reopens every box's log,
// resumes following the turns that were running, and starts the lifecycle
// timers and the warm pool.
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.Store == nil || cfg.VM == nil || cfg.Accounts == nil || cfg.Audit == nil || cfg.Redactor == nil || cfg.DataDir == "" {
		return nil, errors.New("fleet: Store, VM, Accounts, Audit, Redactor and DataDir are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Policy.TickEvery <= 0 {
		cfg.Policy.TickEvery = 5 * time.Second
	}
	if cfg.Policy.PRPollEvery <= 0 {
		cfg.Policy.PRPollEvery = 30 * time.Second
	}
	if cfg.Cluster != nil && cfg.ID == "" {
		return nil, errors.New("fleet: a Cluster needs an ID")
	}
	site, err := netpolicy.ParsePresetRefs(cfg.SitePresets, true)
	if err != nil {
		return nil, fmt.Errorf("fleet: site default presets (net.default_presets): %w", err)
	}
	cfg.SitePresets = site
	siteMirrors, err := parseSiteMirrors(cfg.SiteMirrors)
	if err != nil {
		return nil, fmt.Errorf("fleet: net.mirrors: %w", err)
	}
	logDir := filepath.Join(cfg.DataDir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := newFleet(ctx, cfg, logDir)
	f.mirrors.site = siteMirrors
	f.auditSiteMirrors(ctx)
	if f.leases.on() {
		// Listen before recovering, so no change made meanwhile is missed.
		ch, err := cfg.Cluster.Listen(f.bg.ctx, ClusterChannel)
		if err != nil {
			f.bg.cancel()
			return nil, fmt.Errorf("fleet: %w", err)
		}
		f.bg.wg.Add(1)
		go f.listen(ch)
	}
	if err := f.recover(ctx); err != nil {
		f.bg.cancel()
		f.bg.wg.Wait()
		return nil, err
	}
	f.notify.start()
	p := f.policy.get()
	f.bg.every(p.TickEvery, f.Tick)
	f.bg.every(p.PRPollEvery, f.watchPRs)
	f.bg.wg.Go(f.watchVM)
	f.pool.refill()
	return f, nil
}

// newFleet wires the parts to each other and to what they work with.
func newFleet(ctx context.Context, cfg Config, logDir string) *Fleet {
	bg := &background{}
	bg.ctx, bg.cancel = context.WithCancel(context.WithoutCancel(ctx))
	f := &Fleet{
		store: cfg.Store, vm: cfg.VM, audit: cfg.Audit, red: cfg.Redactor, dataDir: cfg.DataDir,
		now: cfg.Now, log: cfg.Logger, gitEnv: cfg.GitEnv, net: cfg.Network, forge: cfg.Forge,
		presets: cfg.Presets, sitePresets: cfg.SitePresets, profileStore: cfg.Profiles,
		bg: bg, policy: &livePolicy{p: cfg.Policy},
		leases: &leases{cluster: cfg.Cluster, id: cfg.ID, log: cfg.Logger},
	}
	f.mirrors = &mirrors{store: cfg.Mirrors}
	f.events = &events{red: f.red, now: f.now, leases: f.leases, bg: bg, subs: map[*sub]struct{}{}}
	f.records = &records{store: f.store, audit: f.audit, events: f.events, now: f.now, log: f.log}
	f.locks = &locks{records: f.records, leases: f.leases, boxes: map[string]*boxMutex{}}
	f.settings = &settings{accounts: cfg.Accounts, mcp: cfg.MCP, sealer: cfg.Sealer, private: cfg.PrivateUpstreams,
		net: f.net, vm: f.vm, red: f.red, audit: f.audit, now: f.now, log: f.log}
	f.logs = &logs{dir: logDir, red: f.red, vm: f.vm, records: f.records, leases: f.leases, bg: bg, log: f.log,
		boxes: map[string]*boxLog{}}
	f.runs = &runs{vm: f.vm, store: f.store, net: f.net, records: f.records, events: f.events, logs: f.logs,
		locks: f.locks, leases: f.leases, settings: f.settings, bg: bg, now: f.now, log: f.log,
		followers: map[string]*follower{}}
	f.logs.runs = f.runs
	f.pool = &pool{vm: f.vm, net: f.net, policy: f.policy, leases: f.leases, audit: f.audit, bg: bg, now: f.now, log: f.log}
	f.files = &files{vm: f.vm, locks: f.locks, red: f.red, audit: f.audit, now: f.now}
	f.grants = &grants{records: f.records, locks: f.locks, settings: f.settings, site: f.sitePresets, boxes: map[string]string{}}
	f.grants.mirrors = f.mirrors
	f.notify = newNotifier(cfg, f)
	f.previews = &previews{spent: map[string]time.Time{}}
	return f
}

// Close stops following turns and the timers. Boxes keep running; the next
// New resumes them from the store.
func (f *Fleet) Close() error {
	f.bg.cancel()
	f.bg.wg.Wait()
	return f.logs.closeAll()
}

func (f *Fleet) list(ctx context.Context, caller keys.Actor) ([]Box, error) {
	recs, err := f.records.loadAll(ctx)
	if err != nil {
		return nil, f.safeErr(err)
	}
	var out []Box
	for _, rec := range recs {
		if rec.State == Destroyed || !canSee(caller, rec.Owner) {
			continue
		}
		b, err := f.view(ctx, rec)
		if err != nil {
			return nil, f.safeErr(err)
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Box) int { return b.Created.Compare(a.Created) })
	return out, nil
}

func (f *Fleet) get(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return Box{}, f.safeErr(err)
	}
	b, err := f.view(ctx, rec)
	return b, f.safeErr(err)
}

// view turns a record into what fronts see: redacted, with derived fields.
func (f *Fleet) view(ctx context.Context, rec record) (Box, error) {
	b := Box{
		Name: rec.Name, Owner: rec.Owner, State: rec.State, Agent: rec.Agent,
		Task: f.red.String(rec.Task), Title: f.red.String(rec.Title), Repos: rec.Repos, Allow: rec.Allow, Keep: rec.Keep,
		Question: f.red.String(rec.Question), Reason: f.red.String(rec.Reason),
		Created: rec.Created, Updated: rec.Updated, LastOutput: rec.LastOutput, SleptAt: rec.SleptAt,
		Deadline: rec.Deadline, Turns: rec.Turn, CostUSD: rec.CostUSD, Profile: rec.Profile,
	}
	size := sizeOf(f.policy.get(), rec)
	b.MemoryMiB, b.VCPUs = size.memMiB, size.vcpus
	if b.Repos == nil {
		b.Repos = []Repo{}
	}
	if b.Allow == nil {
		b.Allow = []string{}
	}
	ttl := f.policy.get().SleepTTL
	if rec.State == Sleeping && !rec.Keep && ttl > 0 && !rec.SleptAt.IsZero() {
		b.Expires = rec.SleptAt.Add(ttl)
	}
	if items, err := f.store.ListInbox(ctx, rec.Name); err == nil {
		b.Inbox = len(items)
	} else {
		return Box{}, err
	}
	b.LogSize = f.logs.size(rec.Name)
	if docs, err := f.store.ListPRs(ctx, rec.Name); err == nil {
		for _, d := range docs {
			b.PRs = append(b.PRs, storedCard(d))
		}
	} else {
		return Box{}, err
	}
	return b, nil
}

// safeErr redacts an error's text before it reaches a front, keeping its
// identity for errors.Is.
func (f *Fleet) safeErr(err error) error {
	if err == nil {
		return nil
	}
	return f.red.Error(err)
}

// entry is the audit row of an action by caller on box.
func (f *Fleet) entry(caller keys.Actor, action, box string) audit.Entry {
	return caller.Entry(f.now(), action, box)
}

// system is the actor of the core's own actions (timers, the pool).
func system() keys.Actor { return keys.Actor{User: "sbx", Role: keys.RoleAdmin, Front: "core"} }
