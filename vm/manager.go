package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"sbx.dev/sbx/vm/agent"
)

// Config configures a Manager. Zero caps mean unlimited.
type Config struct {
	Backend Backend
	// MaxBoxes caps boxes that hold a machine or may wake into one
	// (creating, running, sleeping) among the backend's records. A backend
	// whose cluster holds the caps for every gateway (Kubernetes: the
	// namespace's quota) gets none here.
	MaxBoxes int
	// MaxMemoryMiB caps the sum of those boxes' guest memory.
	MaxMemoryMiB int
	// Defaults fill a Spec's zero fields; their own zero fields become
	// 256 MiB memory, 1 vCPU and a 1024 MiB workspace.
	Defaults Spec
	// BootTimeout bounds a boot or wake until the agent answers (default 60 s).
	BootTimeout time.Duration
	// Once is the cluster's lease, for records every gateway shares: only
	// the gateway it says yes to acts on a timer or a crash they all see.
	// Records that are this host's own never ask. nil: always act.
	Once   Once
	Logger *slog.Logger
}

// Manager owns the boxes its backend's records hold. It checks names, caps
// and states, and leaves machines to the Backend's Driver and records to
// its Records. Safe for concurrent use; this gateway's operations on one
// box are serialised (gateways sharing records do not lock each other out:
// the fleet above takes a lease where that matters).
type Manager struct {
	backend Backend
	records Records
	cfg     Config
	log     *slog.Logger
	ctx     context.Context // ends at Close: stops watchers and timers
	cancel  context.CancelFunc
	started chan struct{} // closed once records is set
	wg      sync.WaitGroup
	events  *eventHub

	mu     sync.Mutex
	boxes  map[string]*entry
	closed bool
}

// entry is what this gateway holds for one box besides its record.
type entry struct {
	op sync.Mutex // held for a whole lifecycle operation

	// guarded by Manager.mu
	creating int // memory of a box being created, not in the records yet
	timer    *time.Timer
	deadline time.Time // what timer is set for
	armed    uint64    // counts arm's timers: a callback whose count is not the latest is stale
	client   *agent.Client
}

// New starts a Manager over cfg.Backend and re-adopts the boxes its
// records hold.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Backend == nil {
		return nil, errors.New("vm manager: no backend")
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	if cfg.Once == nil {
		cfg.Once = func(context.Context, string, time.Duration) bool { return true }
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(BuiltinDefaults())
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{backend: cfg.Backend, cfg: cfg, log: log, ctx: mctx, cancel: cancel,
		started: make(chan struct{}), boxes: map[string]*entry{}, events: newEventHub(log)}
	records, err := cfg.Backend.Records(ctx, follower{m}, cfg.Once)
	if err != nil {
		cancel()
		m.wg.Wait()
		m.events.Close()
		return nil, fmt.Errorf("vm manager: recover boxes: %w", err)
	}
	m.records = records
	close(m.started)
	return m, nil
}

// ready reports false when the Manager closed before its records started.
func (m *Manager) ready() bool {
	select {
	case <-m.started:
		return true
	case <-m.ctx.Done():
		return false
	}
}

// holdsMachine reports whether a box counts against the caps.
func holdsMachine(s State) bool { return s == Creating || s == Running || s == Sleeping }

// checkCapsLocked refuses a box of memMiB when a cap would be passed.
func (m *Manager) checkCapsLocked(memMiB int) error {
	n, mem := 0, 0
	for _, b := range m.records.List() {
		if holdsMachine(b.State) {
			n++
			mem += b.Spec.MemoryMiB
		}
	}
	for _, e := range m.boxes {
		if e.creating > 0 {
			n++
			mem += e.creating
		}
	}
	if m.cfg.MaxBoxes > 0 && n+1 > m.cfg.MaxBoxes {
		return fmt.Errorf("%w: max boxes per host is %d (%d in use)", ErrLimit, m.cfg.MaxBoxes, n)
	}
	if m.cfg.MaxMemoryMiB > 0 && mem+memMiB > m.cfg.MaxMemoryMiB {
		return fmt.Errorf("%w: max total guest memory is %d MiB (%d MiB in use, %d MiB asked)",
			ErrLimit, m.cfg.MaxMemoryMiB, mem, memMiB)
	}
	return nil
}

// entryLocked returns the box's entry, making one.
func (m *Manager) entryLocked(name string) *entry {
	e := m.boxes[name]
	if e == nil {
		e = &entry{}
		m.boxes[name] = e
	}
	return e
}

// BootNoter is a Backend that says in a few words how it boots new
// machines ("small kernel", "stock kernel"), for the people waiting on one.
type BootNoter interface {
	BootNote() string
}

// BootNote says how new machines boot, in a few words ("small kernel",
// "stock kernel"); "" when the backend does not say.
func (m *Manager) BootNote() string {
	if b, ok := m.backend.(BootNoter); ok {
		return b.BootNote()
	}
	return ""
}

// Create provisions a box (disks, record) in state creating; Start boots it.
func (m *Manager) Create(ctx context.Context, name string, spec Spec) (Box, error) {
	if err := ValidName(name); err != nil {
		return Box{}, err
	}
	spec = spec.WithDefaults(m.cfg.Defaults)
	if err := spec.CheckSize(name); err != nil {
		return Box{}, err
	}
	if spec.Egress != "" {
		if err := ValidEgress(spec.Egress); err != nil {
			return Box{}, fmt.Errorf("box %q: %w", name, err)
		}
	}
	now := time.Now().UTC()
	box := Box{Name: name, Spec: spec, State: Creating, Created: now, Updated: now}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Box{}, ErrClosed
	}
	e := m.entryLocked(name)
	if _, ok := m.records.Get(name); ok || e.creating > 0 {
		m.mu.Unlock()
		return Box{}, fmt.Errorf("box %q: %w", name, ErrExists)
	}
	if err := m.checkCapsLocked(spec.MemoryMiB); err != nil {
		m.mu.Unlock()
		return Box{}, fmt.Errorf("box %q refused: %w", name, err)
	}
	e.creating = spec.MemoryMiB
	m.mu.Unlock()
	e.op.Lock()
	defer e.op.Unlock()
	err := m.backend.Create(ctx, box)
	m.mu.Lock()
	if err == nil {
		// With the reservation dropped at once, a cap never counts it twice.
		m.records.Created(box)
	}
	e.creating = 0
	m.mu.Unlock()
	if err != nil {
		return Box{}, fmt.Errorf("create box %q: %w", name, err)
	}
	return box, nil
}

// lock takes the box's operation lock and reads the record it acts on;
// the caller unlocks e.op when err is nil.
func (m *Manager) lock(ctx context.Context, name string) (*entry, Box, error) {
	if err := ValidName(name); err != nil {
		return nil, Box{}, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, Box{}, ErrClosed
	}
	e := m.entryLocked(name)
	m.mu.Unlock()
	e.op.Lock()
	m.mu.Lock()
	gone := m.boxes[name] != e
	m.mu.Unlock()
	if gone {
		e.op.Unlock()
		return nil, Box{}, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	box, err := m.records.Fresh(ctx, name)
	if err != nil {
		m.mu.Lock()
		if m.boxes[name] == e && e.creating == 0 && e.timer == nil && e.client == nil {
			delete(m.boxes, name) // a name looked up, not a box
		}
		m.mu.Unlock()
		e.op.Unlock()
		return nil, Box{}, err
	}
	return e, box, nil
}

// save records box's transition to state to (with note) and returns the
// new record; the records publish it.
func (m *Manager) save(box Box, to State, note string) Box {
	from := box.State
	box.State, box.Reason, box.Updated = to, note, time.Now().UTC()
	if err := m.records.Save(m.ctx, from, box); err != nil {
		m.log.Error("save box record", "box", box.Name, "err", err)
	}
	if to == Failed {
		m.log.Warn("box failed", "box", box.Name, "from", from, "reason", note)
	} else {
		m.log.Info("box state", "box", box.Name, "from", from, "to", to, "note", note)
	}
	m.arm(box)
	return box
}

// bootStep is one named step of bringing a machine up (model: the named
// handlers of firecracker-go-sdk); fail prefixes the box's Reason when the
// step fails.
type bootStep struct {
	fail string
	run  func(ctx context.Context) error
}

// bootSteps are a start's or a wake's steps: launch the machine, follow
// it, and wait for its agent, killing a machine that never answered.
func (m *Manager) bootSteps(e *entry, name, launchFail string, launch func(context.Context) error, readyFail string) []bootStep {
	return []bootStep{
		{launchFail, launch},
		{readyFail, func(context.Context) error { m.records.Launched(name); return nil }},
		{readyFail, func(ctx context.Context) error {
			err := m.readyAgent(ctx, name, e)
			if err != nil {
				err = m.whyDown(ctx, name, err)
				m.backend.Kill(context.WithoutCancel(ctx), name)
			}
			return err
		}},
	}
}

// boot runs steps in order; the first that fails fails the box.
func (m *Manager) boot(ctx context.Context, op string, box Box, steps []bootStep) (Box, error) {
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return m.save(box, Failed, s.fail+": "+err.Error()), fmt.Errorf("%s box %q: %w", op, box.Name, err)
		}
	}
	return box, nil
}

// Start cold-boots a created (or failed) box and returns once its agent
// answers.
func (m *Manager) Start(ctx context.Context, name string) (Box, error) {
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	switch box.State {
	case Creating:
	case Failed:
		m.mu.Lock()
		err := m.checkCapsLocked(box.Spec.MemoryMiB)
		m.mu.Unlock()
		if err != nil {
			return Box{}, fmt.Errorf("box %q refused: %w", name, err)
		}
		if dl := box.Deadline(); !dl.IsZero() && time.Now().After(dl) {
			return Box{}, fmt.Errorf("start box %q: %w: max duration %v is over", name, ErrState, box.Spec.MaxDuration)
		}
		box = m.save(box, Creating, "restart")
	default:
		return Box{}, fmt.Errorf("start box %q: %w: it is %s", name, ErrState, box.State)
	}
	launch := func(ctx context.Context) error { return m.backend.Start(ctx, name) }
	if box, err = m.boot(ctx, "start", box, m.bootSteps(e, name, "start", launch, "boot")); err != nil {
		return box, err
	}
	if box.Started.IsZero() {
		box.Started = time.Now().UTC()
	}
	return m.save(box, Running, ""), nil
}

// whyDown adds the machine's own exit reason to an agent error when the
// machine has just ended (a guest panic reads better than "connection reset").
func (m *Manager) whyDown(ctx context.Context, name string, err error) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 200*time.Millisecond)
	defer cancel()
	if werr := m.backend.Wait(wctx, name); werr != nil && wctx.Err() == nil {
		return fmt.Errorf("%w (%v)", err, werr)
	}
	return err
}

func (m *Manager) dropClient(e *entry) {
	m.mu.Lock()
	c := e.client
	e.client = nil
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// watch fails the box if its machine ends on its own and is still the
// box's current one; with shared records, one gateway records it.
func (m *Manager) watch(name, machine string, stale func() bool) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		if !m.ready() {
			return
		}
		err := m.backend.Wait(m.ctx, name)
		if err == nil || m.ctx.Err() != nil || stale() {
			return
		}
		if !m.records.Once(m.ctx, "box/"+name+"/machine/"+machine, 10*time.Minute) {
			return
		}
		e, box, lerr := m.lock(m.ctx, name)
		if lerr != nil {
			return
		}
		defer e.op.Unlock()
		if stale() || box.State != Running && box.State != Creating {
			return
		}
		m.dropClient(e)
		m.save(box, Failed, err.Error())
	}()
}

// arm sets the max-duration timer from the box's first start, so the
// limit holds across sleeps and gateway restarts.
func (m *Manager) arm(box Box) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dl := box.Deadline()
	if m.closed || dl.IsZero() || !holdsMachine(box.State) {
		return
	}
	e := m.entryLocked(box.Name)
	if e.timer != nil {
		if e.deadline.Equal(dl) {
			return
		}
		// The deadline moved (SetMaxDuration, here or on another gateway).
		e.timer.Stop()
	}
	name := box.Name
	e.deadline = dl
	// The callback knows its timer by count, not by the *time.Timer: a
	// deadline already past fires at once, before AfterFunc has returned
	// the timer to compare with (a moved-into-the-past deadline was lost so).
	e.armed++
	n := e.armed
	e.timer = time.AfterFunc(time.Until(dl), func() { m.expire(name, e, n) })
}

// stopTimer stops e's max-duration timer, and a callback of it already
// running finds itself stale. The caller holds m.mu.
func (e *entry) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.armed++
}

func (m *Manager) expire(name string, armed *entry, n uint64) {
	m.mu.Lock()
	if armed.armed != n {
		m.mu.Unlock()
		return // re-armed for another deadline meanwhile
	}
	armed.timer = nil
	m.mu.Unlock()
	if m.ctx.Err() != nil || !m.ready() {
		return
	}
	box, err := m.records.Fresh(m.ctx, name)
	if err != nil || !holdsMachine(box.State) {
		return
	}
	if dl := box.Deadline(); dl.After(time.Now()) {
		// Extended since the timer was set (on another gateway, say).
		m.arm(box)
		return
	}
	// Keyed by the box's first start and deadline: a later box of the same
	// name, or a later deadline of this one, has its own.
	if !m.records.Once(m.ctx, fmt.Sprintf("box/%s/max-duration/%d/%d", name, box.Started.UnixNano(), box.Deadline().UnixNano()), 10*time.Minute) {
		return
	}
	e, box, err := m.lock(m.ctx, name)
	if err != nil {
		return
	}
	defer e.op.Unlock()
	if !holdsMachine(box.State) {
		return
	}
	if dl := box.Deadline(); dl.After(time.Now()) {
		m.arm(box)
		return
	}
	m.dropClient(e)
	if err := m.backend.Kill(m.ctx, name); err != nil {
		m.log.Error("max duration: kill", "box", name, "err", err)
	}
	m.save(box, Failed, fmt.Sprintf("max duration %v reached", box.Spec.MaxDuration))
}

// Sleep saves the box's memory, keeps its disk and ends its machine.
func (m *Manager) Sleep(ctx context.Context, name string) (Box, error) {
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if box.State != Running {
		return Box{}, fmt.Errorf("sleep box %q: %w: it is %s", name, ErrState, box.State)
	}
	m.dropClient(e)
	if err := m.backend.Sleep(ctx, name); err != nil {
		return box, fmt.Errorf("sleep box %q: %w", name, err)
	}
	return m.save(box, Sleeping, ""), nil
}

// Wake brings a sleeping box back, from its memory snapshot when usable,
// else by a cold boot on the same disk (the box's Reason and the event say
// which).
func (m *Manager) Wake(ctx context.Context, name string) (Box, error) {
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if box.State != Sleeping {
		return Box{}, fmt.Errorf("wake box %q: %w: it is %s", name, ErrState, box.State)
	}
	var res WakeResult
	launch := func(ctx context.Context) (err error) { res, err = m.backend.Wake(ctx, name); return err }
	if box, err = m.boot(ctx, "wake", box, m.bootSteps(e, name, "wake", launch, "wake")); err != nil {
		return box, err
	}
	note := "restored from memory snapshot"
	if res.Cold {
		note = "cold boot: " + res.Reason
	}
	return m.save(box, Running, note), nil
}

// Destroy ends the box's machine and removes everything it had, in any state.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	m.dropClient(e)
	if err := m.backend.Destroy(ctx, name); err != nil {
		return fmt.Errorf("destroy box %q: %w", name, err)
	}
	m.mu.Lock()
	e.stopTimer()
	delete(m.boxes, name)
	m.mu.Unlock()
	m.save(box, Destroyed, "")
	return nil
}

// Stats samples a running box's CPU and private memory.
func (m *Manager) Stats(ctx context.Context, name string) (Stats, error) {
	b, err := m.Get(name)
	if err != nil {
		return Stats{}, err
	}
	if b.State != Running {
		return Stats{}, fmt.Errorf("stats of box %q: %w: it is %s", name, ErrState, b.State)
	}
	return m.backend.Stats(ctx, name)
}

// Get returns a box by name.
func (m *Manager) Get(name string) (Box, error) {
	if err := ValidName(name); err != nil {
		return Box{}, err
	}
	b, ok := m.records.Get(name)
	if !ok {
		return Box{}, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	return b, nil
}

// List returns every box, by name.
func (m *Manager) List() []Box {
	out := m.records.List()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Events streams state changes until ctx ends (with shared records, those
// every gateway makes). A subscriber that falls more than 256 events behind
// loses the surplus (logged), never the manager.
func (m *Manager) Events(ctx context.Context) <-chan Event { return m.events.Subscribe(ctx) }

// Close stops watching the boxes. Their machines keep running; a new
// Manager over the same backend re-adopts them.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var clients []*agent.Client
	for _, e := range m.boxes {
		e.stopTimer()
		if e.client != nil {
			clients = append(clients, e.client)
			e.client = nil
		}
	}
	m.mu.Unlock()
	m.events.Close()
	m.cancel()
	for _, c := range clients {
		c.Close()
	}
	m.wg.Wait()
	return m.backend.Close()
}

// agent returns a live agent client for a running box, connecting (again)
// when there is none: a box another gateway started is reached the same
// way.
func (m *Manager) agent(ctx context.Context, name string) (*agent.Client, error) {
	b, err := m.Get(name)
	if err != nil {
		return nil, err
	}
	if b.State != Running {
		return nil, fmt.Errorf("box %q: %w: it is %s", name, ErrState, b.State)
	}
	m.mu.Lock()
	e := m.entryLocked(name)
	m.mu.Unlock()
	live := func() *agent.Client {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c := e.client; c != nil {
			select {
			case <-c.Done():
			default:
				return c
			}
		}
		return nil
	}
	if c := live(); c != nil {
		return c, nil
	}
	// Connect under the op lock so concurrent callers share one session.
	e.op.Lock()
	defer e.op.Unlock()
	if c := live(); c != nil {
		return c, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := m.dialAgent(cctx, name)
	if err != nil {
		return nil, fmt.Errorf("box %q: %w", name, err)
	}
	m.mu.Lock()
	e.client = c
	m.mu.Unlock()
	return c, nil
}

// follower is the Manager as its Records see it.
type follower struct{ m *Manager }

func (f follower) Emit(ev Event)                                 { f.m.events.Emit(ev) }
func (f follower) Arm(box Box)                                   { f.m.arm(box) }
func (f follower) Watch(name, machine string, stale func() bool) { f.m.watch(name, machine, stale) }

func (f follower) Forget(name string) {
	m := f.m
	m.mu.Lock()
	e := m.boxes[name]
	var c *agent.Client
	if e != nil {
		e.stopTimer()
		c, e.client = e.client, nil
		if e.creating == 0 {
			delete(m.boxes, name) // an operation waiting for it finds the box gone
		}
	}
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
