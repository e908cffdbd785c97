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
	// (creating, running, sleeping).
	MaxBoxes int
	// MaxMemoryMiB caps the sum of those boxes' guest memory.
	MaxMemoryMiB int
	// Defaults fill a Spec's zero fields; their own zero fields become
	// 256 MiB memory, 1 vCPU and a 1024 MiB workspace.
	Defaults Spec
	// BootTimeout bounds a boot or wake until the agent answers (default 60 s).
	BootTimeout time.Duration
	Logger      *slog.Logger
}

// Manager owns the boxes of one host. It checks names, caps and states and
// leaves machines to its Backend. Safe for concurrent use; operations on
// one box are serialised.
type Manager struct {
	// AgentOps: Exec, the file calls and Watch, through agent.
	AgentOps

	backend Backend
	cfg     Config
	log     *slog.Logger
	ctx     context.Context // ends at Close: stops watchers and timers
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	events  *EventHub

	mu     sync.Mutex
	boxes  map[string]*entry
	closed bool
}

type entry struct {
	op sync.Mutex // held for a whole lifecycle operation

	// guarded by Manager.mu
	box    Box
	gen    int // bumped at every machine launch; stale watchers see a newer one
	timer  *time.Timer
	client *agent.Client
}

// New starts a Manager over cfg.Backend and re-adopts the boxes it holds.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if cfg.Backend == nil {
		return nil, errors.New("vm manager: no backend")
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(BuiltinDefaults())
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{backend: cfg.Backend, cfg: cfg, log: log, ctx: mctx, cancel: cancel,
		boxes: map[string]*entry{}, events: NewEventHub(log)}
	m.AgentOps = AgentOps{Client: m.agent}
	boxes, err := cfg.Backend.Recover(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("vm manager: recover boxes: %w", err)
	}
	for _, b := range boxes {
		e := &entry{box: b}
		m.boxes[b.Name] = e
		switch b.State {
		case Running:
			m.watch(b.Name, e)
		case Creating:
			// Provisioned but not running; a machine left booting when the
			// gateway stopped is ended so Start begins clean.
			if err := cfg.Backend.Kill(ctx, b.Name); err != nil {
				log.Warn("recover: end half-booted box", "box", b.Name, "err", err)
			}
		}
		m.arm(b.Name, e)
		log.Info("recover: box", "box", b.Name, "state", b.State, "reason", b.Reason)
	}
	return m, nil
}

func (m *Manager) specDefaults(s Spec) Spec { return s.WithDefaults(m.cfg.Defaults) }

// holdsMachine reports whether a box counts against the host caps.
func holdsMachine(s State) bool { return s == Creating || s == Running || s == Sleeping }

// checkCapsLocked refuses a box of memMiB when a cap would be passed.
// except names a box already counted (a failed box restarting is not).
func (m *Manager) checkCapsLocked(memMiB int) error {
	n, mem := 0, 0
	for _, e := range m.boxes {
		if holdsMachine(e.box.State) {
			n++
			mem += e.box.Spec.MemoryMiB
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

// Create provisions a box (disks, record) in state creating; Start boots it.
func (m *Manager) Create(ctx context.Context, name string, spec Spec) (Box, error) {
	if err := ValidName(name); err != nil {
		return Box{}, err
	}
	spec = m.specDefaults(spec)
	if err := spec.CheckSize(name); err != nil {
		return Box{}, err
	}
	if spec.Egress != "" {
		if err := ValidEgress(spec.Egress); err != nil {
			return Box{}, fmt.Errorf("box %q: %w", name, err)
		}
	}
	now := time.Now().UTC()
	e := &entry{box: Box{Name: name, Spec: spec, State: Creating, Created: now, Updated: now}}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Box{}, ErrClosed
	}
	if m.boxes[name] != nil {
		m.mu.Unlock()
		return Box{}, fmt.Errorf("box %q: %w", name, ErrExists)
	}
	if err := m.checkCapsLocked(spec.MemoryMiB); err != nil {
		m.mu.Unlock()
		return Box{}, fmt.Errorf("box %q refused: %w", name, err)
	}
	m.boxes[name] = e
	e.op.Lock()
	m.mu.Unlock()
	defer e.op.Unlock()
	if err := m.backend.Create(ctx, e.box); err != nil {
		m.mu.Lock()
		delete(m.boxes, name)
		m.mu.Unlock()
		return Box{}, fmt.Errorf("create box %q: %w", name, err)
	}
	m.emit(Event{Box: name, To: Creating})
	return e.box, nil
}

// lock finds a box and takes its operation lock.
func (m *Manager) lock(name string) (*entry, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e := m.boxes[name]
	m.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	e.op.Lock()
	m.mu.Lock()
	gone := m.boxes[name] != e
	m.mu.Unlock()
	if gone {
		e.op.Unlock()
		return nil, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	return e, nil
}

// setState records a transition, persists it and tells subscribers.
func (m *Manager) setState(e *entry, to State, note string) {
	m.mu.Lock()
	from := e.box.State
	e.box.State = to
	e.box.Reason = note
	e.box.Updated = time.Now().UTC()
	b := e.box
	m.mu.Unlock()
	if to != Destroyed {
		if err := m.backend.Save(m.ctx, b); err != nil {
			m.log.Error("save box record", "box", b.Name, "err", err)
		}
	}
	if to == Failed {
		m.log.Warn("box failed", "box", b.Name, "from", from, "reason", note)
	} else {
		m.log.Info("box state", "box", b.Name, "from", from, "to", to, "note", note)
	}
	m.emit(Event{Box: b.Name, From: from, To: to, Note: note, At: b.Updated})
}

// Start cold-boots a created (or failed) box and returns once its agent
// answers.
func (m *Manager) Start(ctx context.Context, name string) (Box, error) {
	e, err := m.lock(name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	m.mu.Lock()
	st := e.box.State
	if st == Failed {
		if err := m.checkCapsLocked(e.box.Spec.MemoryMiB); err != nil {
			m.mu.Unlock()
			return Box{}, fmt.Errorf("box %q refused: %w", name, err)
		}
	}
	m.mu.Unlock()
	if st != Creating && st != Failed {
		return Box{}, fmt.Errorf("start box %q: %w: it is %s", name, ErrState, st)
	}
	if st == Failed {
		if !e.box.Deadline().IsZero() && time.Now().After(e.box.Deadline()) {
			return Box{}, fmt.Errorf("start box %q: %w: max duration %v is over", name, ErrState, e.box.Spec.MaxDuration)
		}
		m.setState(e, Creating, "restart")
	}
	if err := m.backend.Start(ctx, name); err != nil {
		m.setState(e, Failed, "start: "+err.Error())
		return m.snapshot(e), fmt.Errorf("start box %q: %w", name, err)
	}
	m.watch(name, e)
	if err := m.ready(ctx, name, e); err != nil {
		err = m.whyDown(ctx, name, err)
		m.backend.Kill(context.WithoutCancel(ctx), name)
		m.setState(e, Failed, "boot: "+err.Error())
		return m.snapshot(e), fmt.Errorf("start box %q: %w", name, err)
	}
	m.mu.Lock()
	if e.box.Started.IsZero() {
		e.box.Started = time.Now().UTC()
	}
	m.mu.Unlock()
	m.setState(e, Running, "")
	m.arm(name, e)
	return m.snapshot(e), nil
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

func (m *Manager) snapshot(e *entry) Box {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.box
}

// ready waits for the agent of a just launched machine, then sets its
// clock and reseeds its entropy (a restored snapshot has stale copies of
// both).
func (m *Manager) ready(ctx context.Context, name string, e *entry) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout)
	defer cancel()
	m.dropClient(e)
	c, err := ReadyAgent(ctx, m.backend, name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	e.client = c
	m.mu.Unlock()
	return nil
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

// watch marks the box failed if its current machine ends on its own.
func (m *Manager) watch(name string, e *entry) {
	m.mu.Lock()
	e.gen++
	gen := e.gen
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := m.backend.Wait(m.ctx, name)
		if err == nil || m.ctx.Err() != nil {
			return
		}
		e.op.Lock()
		defer e.op.Unlock()
		m.mu.Lock()
		stale := e.gen != gen || m.boxes[name] != e || !(e.box.State == Running || e.box.State == Creating)
		m.mu.Unlock()
		if stale {
			return
		}
		m.dropClient(e)
		m.setState(e, Failed, err.Error())
	}()
}

// arm sets the max-duration timer from the box's first start, so the
// limit holds across sleeps and gateway restarts.
func (m *Manager) arm(name string, e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dl := e.box.Deadline()
	if dl.IsZero() || e.timer != nil || !holdsMachine(e.box.State) {
		return
	}
	e.timer = time.AfterFunc(time.Until(dl), func() { m.expire(name, e) })
}

func (m *Manager) expire(name string, e *entry) {
	if m.ctx.Err() != nil {
		return
	}
	e.op.Lock()
	defer e.op.Unlock()
	m.mu.Lock()
	live := m.boxes[name] == e && holdsMachine(e.box.State)
	e.timer = nil
	d := e.box.Spec.MaxDuration
	m.mu.Unlock()
	if !live {
		return
	}
	m.dropClient(e)
	if err := m.backend.Kill(m.ctx, name); err != nil {
		m.log.Error("max duration: kill", "box", name, "err", err)
	}
	m.setState(e, Failed, fmt.Sprintf("max duration %v reached", d))
}

// Sleep saves the box's memory, keeps its disk and ends its machine.
func (m *Manager) Sleep(ctx context.Context, name string) (Box, error) {
	e, err := m.lock(name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if st := m.snapshot(e).State; st != Running {
		return Box{}, fmt.Errorf("sleep box %q: %w: it is %s", name, ErrState, st)
	}
	m.dropClient(e)
	if err := m.backend.Sleep(ctx, name); err != nil {
		return m.snapshot(e), fmt.Errorf("sleep box %q: %w", name, err)
	}
	m.setState(e, Sleeping, "")
	return m.snapshot(e), nil
}

// Wake brings a sleeping box back, from its memory snapshot when usable,
// else by a cold boot on the same disk (the box's Reason and the event say
// which).
func (m *Manager) Wake(ctx context.Context, name string) (Box, error) {
	e, err := m.lock(name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if st := m.snapshot(e).State; st != Sleeping {
		return Box{}, fmt.Errorf("wake box %q: %w: it is %s", name, ErrState, st)
	}
	res, err := m.backend.Wake(ctx, name)
	if err != nil {
		m.setState(e, Failed, "wake: "+err.Error())
		return m.snapshot(e), fmt.Errorf("wake box %q: %w", name, err)
	}
	m.watch(name, e)
	if err := m.ready(ctx, name, e); err != nil {
		err = m.whyDown(ctx, name, err)
		m.backend.Kill(context.WithoutCancel(ctx), name)
		m.setState(e, Failed, "wake: "+err.Error())
		return m.snapshot(e), fmt.Errorf("wake box %q: %w", name, err)
	}
	note := "restored from memory snapshot"
	if res.Cold {
		note = "cold boot: " + res.Reason
	}
	m.setState(e, Running, note)
	return m.snapshot(e), nil
}

// Destroy ends the box's machine and removes everything it had, in any state.
func (m *Manager) Destroy(ctx context.Context, name string) error {
	e, err := m.lock(name)
	if err != nil {
		return err
	}
	defer e.op.Unlock()
	m.dropClient(e)
	if err := m.backend.Destroy(ctx, name); err != nil {
		return fmt.Errorf("destroy box %q: %w", name, err)
	}
	m.mu.Lock()
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++
	delete(m.boxes, name)
	m.mu.Unlock()
	m.setState(e, Destroyed, "")
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
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.boxes[name]
	if e == nil {
		return Box{}, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	return e.box, nil
}

// List returns every box, by name.
func (m *Manager) List() []Box {
	m.mu.Lock()
	out := make([]Box, 0, len(m.boxes))
	for _, e := range m.boxes {
		out = append(out, e.box)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Events streams state changes until ctx ends. A subscriber that falls
// more than 256 events behind loses the surplus (logged), never the manager.
func (m *Manager) Events(ctx context.Context) <-chan Event { return m.events.Subscribe(ctx) }

func (m *Manager) emit(ev Event) { m.events.Emit(ev) }

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
		if e.timer != nil {
			e.timer.Stop()
		}
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

// agent returns a live agent client for a running box, reconnecting when
// the previous session ended.
func (m *Manager) agent(ctx context.Context, name string) (*agent.Client, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	e := m.boxes[name]
	if e == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("box %q: %w", name, ErrNotFound)
	}
	st, c := e.box.State, e.client
	m.mu.Unlock()
	if st != Running {
		return nil, fmt.Errorf("box %q: %w: it is %s", name, ErrState, st)
	}
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	// Reconnect under the op lock so concurrent callers share one session.
	e.op.Lock()
	defer e.op.Unlock()
	m.mu.Lock()
	c = e.client
	m.mu.Unlock()
	if c != nil {
		select {
		case <-c.Done():
		default:
			return c, nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := DialAgent(cctx, m.backend, name)
	if err != nil {
		return nil, fmt.Errorf("box %q: %w", name, err)
	}
	m.mu.Lock()
	e.client = c
	m.mu.Unlock()
	return c, nil
}
