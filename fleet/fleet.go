// Package fleet is the core every front calls: boxes with owners, the runs
// of an agent inside them, their live logs, questions, follow-ups, diffs and
// lifecycle. It knows no front and renders nothing (see api.go for its whole
// surface); it reaches machines only through Machines (vm.Manager, or
// vm/kube.Machines on a cluster) and the database only through Store.
//
// Several gateways may share one database and one cluster (Config.Cluster,
// cluster.go): they see the same boxes, relay their events to each other,
// act once on what all of them notice, and hand turns over when one dies.
//
// Every call takes the caller (keys.Actor) and resolves the box through
// them; there is no method that acts on a bare box name. Everything that
// leaves a box passes the one redactor before a front sees it.
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
	"sbx.dev/sbx/fleet/runlog"
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
	// TickEvery is how often lifecycle timers are checked (default 5 s).
	TickEvery time.Duration
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
}

// Fleet is the core. Safe for concurrent use; operations on one box are
// serialised by the box's lock.
type Fleet struct {
	store    Store
	vm       Machines
	accounts *accounts.Service
	audit    *audit.Log
	red      *redact.Redactor
	dataDir  string
	now      func() time.Time
	log      *slog.Logger
	gitEnv   []string
	net      Network
	mcp      MCPStore
	sealer   Sealer
	private  []netpolicy.Trust
	cluster  Cluster
	id       string

	mu     sync.Mutex
	policy Policy
	boxes  map[string]*boxRT // runtime state by box name
	pool   pool
	hub    hub

	ctx    context.Context // lives until Close: background work (turns, pool)
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// vmBox maps a machine name to the box that last held it: a hint for
	// the box network's per-request lookup (recordOfVM), checked against
	// the record each time, so a stale entry costs one full scan.
	vmBoxMu sync.Mutex
	vmBox   map[string]string
}

// boxRT is the in-memory side of one box: its lock, its log, and the
// goroutine following the current turn.
type boxRT struct {
	mu      boxMutex // serialises operations on the box
	log     *runlog.Log
	stop    context.CancelFunc // ends the current turn's follower
	stopped chan struct{}      // closed when that follower returned
	// On a cluster (guarded by Fleet.mu): how far this gateway's copy of
	// the log goes, and whether a mirror is bringing it up to date.
	pos       *logPos
	mirroring chan struct{} // closed when the mirror has the finished turns
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
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := &Fleet{
		store: cfg.Store, vm: cfg.VM, accounts: cfg.Accounts, audit: cfg.Audit, red: cfg.Redactor,
		dataDir: cfg.DataDir, now: cfg.Now, log: cfg.Logger, gitEnv: cfg.GitEnv, net: cfg.Network, mcp: cfg.MCP, sealer: cfg.Sealer, private: cfg.PrivateUpstreams,
		policy: cfg.Policy, boxes: map[string]*boxRT{},
		cluster: cfg.Cluster, id: cfg.ID,
	}
	if f.cluster != nil && f.id == "" {
		return nil, errors.New("fleet: a Cluster needs an ID")
	}
	f.hub.init()
	f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if f.cluster != nil {
		// Listen before recovering, so no change made meanwhile is missed.
		ch, err := f.cluster.Listen(f.ctx, ClusterChannel)
		if err != nil {
			f.cancel()
			return nil, fmt.Errorf("fleet: %w", err)
		}
		f.wg.Add(1)
		go f.listen(ch)
	}
	if err := f.recover(ctx); err != nil {
		f.cancel()
		f.wg.Wait()
		return nil, err
	}
	f.wg.Add(2)
	go f.tickLoop()
	go f.watchVM()
	f.refill()
	return f, nil
}

// Close stops following turns and the timers. Boxes keep running; the next
// New resumes them from the store.
func (f *Fleet) Close() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, rt := range f.boxes {
		if rt.log != nil {
			errs = append(errs, rt.log.Close())
		}
	}
	return errors.Join(errs...)
}

// rt returns the runtime state of a box, creating it.
func (f *Fleet) rt(name string) *boxRT {
	f.mu.Lock()
	defer f.mu.Unlock()
	rt := f.boxes[name]
	if rt == nil {
		rt = &boxRT{}
		f.boxes[name] = rt
	}
	return rt
}

// canSee is the one ownership rule: owners see their boxes, admins all.
func canSee(caller keys.Actor, owner string) bool {
	return caller.Role == keys.RoleAdmin || (caller.User != "" && caller.User == owner)
}

// resolve loads a box through the caller: a box they may not see is
// ErrNotFound, worded exactly like a box that does not exist.
func (f *Fleet) resolve(ctx context.Context, caller keys.Actor, name string) (record, error) {
	if err := vm.ValidName(name); err != nil {
		return record{}, fmt.Errorf("box %q: %w", name, ErrInvalid)
	}
	rec, err := f.load(ctx, name)
	if err != nil {
		return record{}, err
	}
	if !canSee(caller, rec.Owner) || rec.State == Destroyed {
		return record{}, notFound(name)
	}
	return rec, nil
}

func notFound(name string) error { return fmt.Errorf("box %q: %w", name, ErrNotFound) }

// lockBox resolves a box and holds its lock; the record is re-read under
// the lock so the caller acts on the latest state.
func (f *Fleet) lockBox(ctx context.Context, caller keys.Actor, name string) (record, *boxRT, error) {
	if _, err := f.resolve(ctx, caller, name); err != nil {
		return record{}, nil, err
	}
	rt := f.rt(name)
	rt.mu.Lock()
	if err := f.lockAcross(ctx, rt, name); err != nil {
		rt.mu.Unlock()
		return record{}, nil, err
	}
	rec, err := f.resolve(ctx, caller, name)
	if err != nil {
		rt.mu.Unlock()
		return record{}, nil, err
	}
	return rec, rt, nil
}

// boxMutex is a box's lock within this gateway and, while release is set,
// across the gateways of a cluster too: Unlock gives both up.
type boxMutex struct {
	sync.Mutex
	release func()
}

func (m *boxMutex) Unlock() {
	if r := m.release; r != nil {
		m.release = nil
		r()
	}
	m.Mutex.Unlock()
}

// boxLockTTL bounds how long a dead gateway's action can hold a box.
const boxLockTTL = 30 * time.Second

// lockAcross takes the box's lock across gateways (a lease), waiting up
// to boxLockTTL, so two users' actions on one box through two gateways
// run one after the other, as they do through one. rt.mu is held: within
// this gateway the lease's holder (its id) is alone.
func (f *Fleet) lockAcross(ctx context.Context, rt *boxRT, name string) error {
	if f.cluster == nil {
		return nil
	}
	key := "box/" + name + "/lock"
	ctx, cancel := context.WithTimeout(ctx, boxLockTTL)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ok, err := f.cluster.TryLease(ctx, key, f.id, boxLockTTL)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("lock box %q across gateways: %w: %w", name, err, ErrUnavailable)
		}
		if ok {
			rt.mu.release = func() {
				if err := f.cluster.ReleaseLease(context.WithoutCancel(ctx), key, f.id); err != nil {
					f.log.Warn("release box lock", "box", name, "err", err)
				}
			}
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("box %q is busy with an action through another gateway: %w", name, ErrUnavailable)
		}
	}
}

func (f *Fleet) list(ctx context.Context, caller keys.Actor) ([]Box, error) {
	recs, err := f.loadAll(ctx)
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
	rec, err := f.resolve(ctx, caller, name)
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
		Task: f.red.String(rec.Task), Repos: rec.Repos, Allow: rec.Allow, Keep: rec.Keep,
		Question: f.red.String(rec.Question), Reason: f.red.String(rec.Reason),
		Created: rec.Created, Updated: rec.Updated, LastOutput: rec.LastOutput, SleptAt: rec.SleptAt,
		Deadline: rec.Deadline, Turns: rec.Turn, CostUSD: rec.CostUSD,
	}
	if b.Repos == nil {
		b.Repos = []Repo{}
	}
	if b.Allow == nil {
		b.Allow = []string{}
	}
	f.mu.Lock()
	ttl := f.policy.SleepTTL
	f.mu.Unlock()
	if rec.State == Sleeping && !rec.Keep && ttl > 0 && !rec.SleptAt.IsZero() {
		b.Expires = rec.SleptAt.Add(ttl)
	}
	if items, err := f.store.ListInbox(ctx, rec.Name); err == nil {
		b.Inbox = len(items)
	} else {
		return Box{}, err
	}
	if fi, err := os.Stat(f.logPath(rec.Name)); err == nil {
		b.LogSize = fi.Size()
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

func (f *Fleet) logDir() string { return filepath.Join(f.dataDir, "logs") }

// logPath is the box's log file (runlog's naming).
func (f *Fleet) logPath(name string) string { return filepath.Join(f.logDir(), name+".log") }
