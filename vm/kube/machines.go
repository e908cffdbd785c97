package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// Machines is what vm.Manager is on one host, for a cluster: every gateway
// has one over the same namespace, and they agree because a box's state
// lives only on its claim (the sbx.dev/record annotation), which each sees
// through its watch. A box created through one gateway is listed, exec'd
// into, slept, woken and destroyed through any other; state changes reach
// every gateway's Events from the watch, not from the gateway that made
// them. A timer or a crash that every gateway notices is acted on by the
// one MachinesConfig.Once says yes to.
//
// It has the methods of vm.Manager the fleet uses. The caps (vm.max_boxes,
// vm.max_memory_mib) are the namespace's quota (Config.MaxBoxes): the API
// server enforces them for every gateway at once.
type Machines struct {
	// AgentOps: Exec, the file calls and Watch, through agent.
	vm.AgentOps

	b      *Backend
	cfg    MachinesConfig
	events *vm.EventHub
	log    *slog.Logger
	ctx    context.Context // ends at Close
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	clients map[string]*agent.Client
	seen    map[string]vm.Box // last record the watch reported, for events
	mine    map[string]vm.Box // last record this gateway wrote (the watch may lag)
	timers  map[string]*time.Timer
	watched map[string]string // box → UID of the Pod a crash watch follows
	closed  bool
}

// MachinesConfig configures Machines.
type MachinesConfig struct {
	// Defaults fill a Spec's zero fields (256 MiB, 1 vCPU, 1024 MiB
	// workspace when zero themselves).
	Defaults vm.Spec
	// BootTimeout bounds a start or wake until the agent answers (60 s).
	BootTimeout time.Duration
	// Once is asked before acting on something every gateway sees (a max
	// duration reached, a Pod that ended on its own): only a gateway it
	// returns true to acts. nil: always act (one gateway).
	Once   func(ctx context.Context, key string, ttl time.Duration) bool
	Logger *slog.Logger
}

// NewMachines starts Machines over a started Backend and takes over its
// Close.
func NewMachines(ctx context.Context, b *Backend, cfg MachinesConfig) (*Machines, error) {
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 60 * time.Second
	}
	cfg.Defaults = cfg.Defaults.WithDefaults(vm.BuiltinDefaults())
	if cfg.Once == nil {
		cfg.Once = func(context.Context, string, time.Duration) bool { return true }
	}
	log := cfg.Logger
	if log == nil {
		log = b.log
	}
	m := &Machines{b: b, cfg: cfg, log: log,
		locks: map[string]*sync.Mutex{}, clients: map[string]*agent.Client{}, seen: map[string]vm.Box{},
		mine: map[string]vm.Box{}, timers: map[string]*time.Timer{}, watched: map[string]string{},
		events: vm.NewEventHub(log)}
	m.AgentOps = vm.AgentOps{Client: m.agent}
	m.ctx, m.stop = context.WithCancel(context.WithoutCancel(ctx))
	// The claims carry the records: every change of one is a possible
	// state change, wherever it was made. Pods tell of crashes.
	if _, err := b.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.onClaim,
		UpdateFunc: func(_, o any) { m.onClaim(o) },
		DeleteFunc: m.onClaimGone,
	}); err != nil {
		m.stop()
		return nil, fmt.Errorf("kubernetes machines: %w", err)
	}
	if _, err := b.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.onPod,
		UpdateFunc: func(_, o any) { m.onPod(o) },
		DeleteFunc: m.onPod,
	}); err != nil {
		m.stop()
		return nil, fmt.Errorf("kubernetes machines: %w", err)
	}
	// A box recorded running whose Pod went while no gateway watched.
	for _, box := range m.List() {
		if box.State != vm.Running || m.b.pod(objectName(box.Name)) != nil {
			continue
		}
		if m.cfg.Once(ctx, "box/"+box.Name+"/machine/gone", time.Minute) {
			m.save(box, vm.Failed, "kubernetes: pod gone while no gateway watched it")
		}
	}
	// A box Pod whose claim went while no gateway watched runs for nobody.
	for _, p := range b.strayPods(b.liveClaim) {
		if m.cfg.Once(ctx, "pod/"+string(p.UID)+"/stray", time.Minute) {
			if err := b.deleteStray(ctx, p); err != nil {
				m.log.Warn("stray pod", "err", err)
			}
		}
	}
	return m, nil
}

// Close stops the watches and timers; Pods keep running.
func (m *Machines) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for _, t := range m.timers {
		t.Stop()
	}
	clients := m.clients
	m.clients = map[string]*agent.Client{}
	m.mu.Unlock()
	m.events.Close()
	m.stop()
	for _, c := range clients {
		c.Close()
	}
	m.wg.Wait()
	return m.b.Close()
}

// recordOf reads the box record a claim carries.
func recordOf(o any) (vm.Box, bool) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok {
		return vm.Box{}, false
	}
	var box vm.Box
	if err := json.Unmarshal([]byte(pvc.Annotations[AnnotRecord]), &box); err != nil || vm.ValidName(box.Name) != nil || objectName(box.Name) != pvc.Name {
		return vm.Box{}, false
	}
	return box, true
}

func (m *Machines) onClaim(o any) {
	box, ok := recordOf(o)
	if !ok {
		return
	}
	m.mu.Lock()
	prev, had := m.seen[box.Name]
	m.seen[box.Name] = box
	m.armLocked(box)
	m.mu.Unlock()
	// The first sight of a box not being created is the watch listing
	// what exists (at start), not a change.
	if had && (prev.State != box.State || prev.Reason != box.Reason && box.State == vm.Failed) || !had && box.State == vm.Creating {
		m.emit(vm.Event{Box: box.Name, From: prev.State, To: box.State, Note: box.Reason, At: box.Updated})
	}
	if box.State == vm.Running {
		m.watchPod(box.Name)
	}
}

func (m *Machines) onClaimGone(o any) {
	box, ok := recordOf(o)
	if !ok {
		return
	}
	m.mu.Lock()
	prev, had := m.seen[box.Name]
	delete(m.seen, box.Name)
	delete(m.mine, box.Name)
	delete(m.watched, box.Name)
	if t := m.timers[box.Name]; t != nil {
		t.Stop()
		delete(m.timers, box.Name)
	}
	c := m.clients[box.Name]
	delete(m.clients, box.Name)
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if had {
		m.emit(vm.Event{Box: box.Name, From: prev.State, To: vm.Destroyed, At: time.Now().UTC()})
	}
}

func (m *Machines) onPod(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		if name := p.Annotations[AnnotName]; name != "" {
			m.watchPod(name)
		}
	}
}

// watchPod follows the current Pod of a running box until it stops; if it
// stopped on its own (not slept, killed or destroyed by sbx) and the record
// still says running, the box fails — recorded by one gateway.
func (m *Machines) watchPod(name string) {
	p := m.b.pod(objectName(name))
	if p == nil || p.Annotations[AnnotStop] != "" {
		return
	}
	m.mu.Lock()
	if m.closed || m.watched[name] == string(p.UID) {
		m.mu.Unlock()
		return
	}
	m.watched[name] = string(p.UID)
	m.mu.Unlock()
	uid := string(p.UID)
	m.wg.Go(func() {
		err := m.b.Wait(m.ctx, name)
		if err == nil || m.ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		stale := m.watched[name] != uid
		m.mu.Unlock()
		if stale || !m.cfg.Once(m.ctx, "box/"+name+"/machine/"+uid, 10*time.Minute) {
			return
		}
		l := m.lock(name)
		defer l.Unlock()
		box, _, rerr := m.b.record(m.ctx, name)
		if rerr != nil || (box.State != vm.Running && box.State != vm.Creating) {
			return
		}
		m.dropClient(name)
		m.save(box, vm.Failed, err.Error())
	})
}

// armLocked sets the max-duration timer of a box from its record.
func (m *Machines) armLocked(box vm.Box) {
	dl := box.Deadline()
	if m.closed || dl.IsZero() || m.timers[box.Name] != nil || !(box.State == vm.Creating || box.State == vm.Running || box.State == vm.Sleeping) {
		return
	}
	name := box.Name
	m.timers[name] = time.AfterFunc(time.Until(dl), func() { m.expire(name) })
}

func (m *Machines) expire(name string) {
	m.mu.Lock()
	delete(m.timers, name)
	m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	box, _, err := m.b.record(m.ctx, name)
	if err != nil || !(box.State == vm.Creating || box.State == vm.Running || box.State == vm.Sleeping) {
		return
	}
	// Keyed by the box's first start: a later box of the same name has its
	// own.
	if !m.cfg.Once(m.ctx, fmt.Sprintf("box/%s/max-duration/%d", name, box.Started.UnixNano()), 10*time.Minute) {
		return
	}
	l := m.lock(name)
	defer l.Unlock()
	if box, _, err = m.b.record(m.ctx, name); err != nil || !(box.State == vm.Creating || box.State == vm.Running || box.State == vm.Sleeping) {
		return
	}
	m.dropClient(name)
	if err := m.b.Kill(m.ctx, name); err != nil {
		m.log.Error("max duration: kill", "box", name, "err", err)
	}
	m.save(box, vm.Failed, fmt.Sprintf("max duration %v reached", box.Spec.MaxDuration))
}

// Events streams the state changes of every box in the namespace, made by
// any gateway, until ctx ends. A subscriber more than 256 behind loses the
// surplus (logged).
func (m *Machines) Events(ctx context.Context) <-chan vm.Event { return m.events.Subscribe(ctx) }

func (m *Machines) emit(ev vm.Event) { m.events.Emit(ev) }

// lock serialises this gateway's operations on one box. Gateways do not
// lock each other out: the fleet above takes a lease where that matters.
func (m *Machines) lock(name string) *sync.Mutex {
	m.mu.Lock()
	l := m.locks[name]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[name] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l
}

// save writes the box's record in state to (with note) and remembers it.
func (m *Machines) save(box vm.Box, to vm.State, note string) vm.Box {
	box.State, box.Reason, box.Updated = to, note, time.Now().UTC()
	if err := m.b.Save(m.ctx, box); err != nil {
		m.log.Error("save box record", "box", box.Name, "err", err)
	}
	m.mu.Lock()
	m.mine[box.Name] = box
	m.armLocked(box)
	m.mu.Unlock()
	if to == vm.Failed {
		m.log.Warn("box failed", "box", box.Name, "reason", note)
	} else {
		m.log.Info("box state", "box", box.Name, "to", to, "note", note)
	}
	return box
}

// Create provisions a box (its claim and record) in state creating.
func (m *Machines) Create(ctx context.Context, name string, spec vm.Spec) (vm.Box, error) {
	if err := vm.ValidName(name); err != nil {
		return vm.Box{}, err
	}
	spec = spec.WithDefaults(m.cfg.Defaults)
	if err := spec.CheckSize(name); err != nil {
		return vm.Box{}, err
	}
	if m.ctx.Err() != nil {
		return vm.Box{}, vm.ErrClosed
	}
	l := m.lock(name)
	defer l.Unlock()
	now := time.Now().UTC()
	box := vm.Box{Name: name, Spec: spec, State: vm.Creating, Created: now, Updated: now}
	if err := m.b.Create(ctx, box); err != nil {
		return vm.Box{}, fmt.Errorf("create box %q: %w", name, err)
	}
	m.mu.Lock()
	m.mine[name] = box
	m.mu.Unlock()
	return box, nil
}

// Start cold-boots a created (or failed) box and returns once its agent
// answers.
func (m *Machines) Start(ctx context.Context, name string) (vm.Box, error) {
	box, unlock, err := m.lockRecord(ctx, name)
	if err != nil {
		return vm.Box{}, err
	}
	defer unlock()
	switch box.State {
	case vm.Creating:
	case vm.Failed:
		if dl := box.Deadline(); !dl.IsZero() && time.Now().After(dl) {
			return box, fmt.Errorf("start box %q: %w: max duration %v is over", name, vm.ErrState, box.Spec.MaxDuration)
		}
		box = m.save(box, vm.Creating, "restart")
	default:
		return box, fmt.Errorf("start box %q: %w: it is %s", name, vm.ErrState, box.State)
	}
	if err := m.b.Start(ctx, name); err != nil {
		return m.save(box, vm.Failed, "start: "+err.Error()), fmt.Errorf("start box %q: %w", name, err)
	}
	if err := m.ready(ctx, name); err != nil {
		_ = m.b.Kill(context.WithoutCancel(ctx), name)
		return m.save(box, vm.Failed, "boot: "+err.Error()), fmt.Errorf("start box %q: %w", name, err)
	}
	if box.Started.IsZero() {
		box.Started = time.Now().UTC()
	}
	return m.save(box, vm.Running, ""), nil
}

// ready waits for the agent of a just started Pod, then sets its clock
// and reseeds its entropy, as vm.Manager does.
func (m *Machines) ready(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout)
	defer cancel()
	m.dropClient(name)
	c, err := vm.ReadyAgent(ctx, m.b, name)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.clients[name] = c
	m.mu.Unlock()
	return nil
}

func (m *Machines) dropClient(name string) {
	m.mu.Lock()
	c := m.clients[name]
	delete(m.clients, name)
	m.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// lockRecord checks the name, takes the box's lock and reads its record;
// the caller calls unlock when err is nil.
func (m *Machines) lockRecord(ctx context.Context, name string) (box vm.Box, unlock func(), err error) {
	if err := vm.ValidName(name); err != nil {
		return vm.Box{}, nil, err
	}
	l := m.lock(name)
	if box, _, err = m.b.record(ctx, name); err != nil {
		l.Unlock()
		return vm.Box{}, nil, err
	}
	return box, l.Unlock, nil
}

// Sleep removes the box's Pod and keeps its claim.
func (m *Machines) Sleep(ctx context.Context, name string) (vm.Box, error) {
	box, unlock, err := m.lockRecord(ctx, name)
	if err != nil {
		return vm.Box{}, err
	}
	defer unlock()
	if box.State != vm.Running {
		return box, fmt.Errorf("sleep box %q: %w: it is %s", name, vm.ErrState, box.State)
	}
	m.dropClient(name)
	if err := m.b.Sleep(ctx, name); err != nil {
		return box, fmt.Errorf("sleep box %q: %w", name, err)
	}
	return m.save(box, vm.Sleeping, ""), nil
}

// Wake starts a new Pod on the box's claim (always a cold boot).
func (m *Machines) Wake(ctx context.Context, name string) (vm.Box, error) {
	box, unlock, err := m.lockRecord(ctx, name)
	if err != nil {
		return vm.Box{}, err
	}
	defer unlock()
	if box.State != vm.Sleeping {
		return box, fmt.Errorf("wake box %q: %w: it is %s", name, vm.ErrState, box.State)
	}
	res, err := m.b.Wake(ctx, name)
	if err != nil {
		return m.save(box, vm.Failed, "wake: "+err.Error()), fmt.Errorf("wake box %q: %w", name, err)
	}
	if err := m.ready(ctx, name); err != nil {
		_ = m.b.Kill(context.WithoutCancel(ctx), name)
		return m.save(box, vm.Failed, "wake: "+err.Error()), fmt.Errorf("wake box %q: %w", name, err)
	}
	return m.save(box, vm.Running, "cold boot: "+res.Reason), nil
}

// Destroy removes the box's Pod and claim, in any state.
func (m *Machines) Destroy(ctx context.Context, name string) error {
	_, unlock, err := m.lockRecord(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	m.dropClient(name)
	if err := m.b.Destroy(ctx, name); err != nil {
		return fmt.Errorf("destroy box %q: %w", name, err)
	}
	m.mu.Lock()
	delete(m.mine, name)
	m.mu.Unlock()
	return nil
}

// Stats samples a running box's CPU and memory.
func (m *Machines) Stats(ctx context.Context, name string) (vm.Stats, error) {
	b, err := m.Get(name)
	if err != nil {
		return vm.Stats{}, err
	}
	if b.State != vm.Running {
		return vm.Stats{}, fmt.Errorf("stats of box %q: %w: it is %s", name, vm.ErrState, b.State)
	}
	return m.b.Stats(ctx, name)
}

// Get returns a box by name: the newer of what the watch saw and what this
// gateway last wrote.
func (m *Machines) Get(name string) (vm.Box, error) {
	if err := vm.ValidName(name); err != nil {
		return vm.Box{}, err
	}
	var box vm.Box
	ok := false
	if pvc := m.b.claim(objectName(name)); pvc != nil && pvc.DeletionTimestamp == nil {
		box, ok = recordOf(pvc)
		ok = ok && box.Name == name
	}
	m.mu.Lock()
	mine, had := m.mine[name]
	m.mu.Unlock()
	if had && (!ok || mine.Updated.After(box.Updated)) {
		return mine, nil
	}
	if !ok {
		return vm.Box{}, fmt.Errorf("box %q: %w", name, vm.ErrNotFound)
	}
	return box, nil
}

// List returns every box of the namespace, by name.
func (m *Machines) List() []vm.Box {
	var out []vm.Box
	for _, o := range m.b.claims.GetStore().List() {
		pvc := o.(*corev1.PersistentVolumeClaim)
		if pvc.DeletionTimestamp != nil {
			continue
		}
		if box, ok := recordOf(pvc); ok {
			if b, err := m.Get(box.Name); err == nil {
				out = append(out, b)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// agent returns a live agent client of a running box, connecting (again)
// when there is none: a box started by another gateway is reached the
// same way.
func (m *Machines) agent(ctx context.Context, name string) (*agent.Client, error) {
	b, err := m.Get(name)
	if err != nil {
		return nil, err
	}
	if b.State != vm.Running {
		return nil, fmt.Errorf("box %q: %w: it is %s", name, vm.ErrState, b.State)
	}
	live := func() *agent.Client {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c := m.clients[name]; c != nil {
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
	l := m.lock(name)
	defer l.Unlock()
	if c := live(); c != nil {
		return c, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := vm.DialAgent(cctx, m.b, name)
	if err != nil {
		return nil, fmt.Errorf("box %q: %w", name, err)
	}
	m.mu.Lock()
	m.clients[name] = c
	m.mu.Unlock()
	return c, nil
}
