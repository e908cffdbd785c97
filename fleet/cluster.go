package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"sbx.dev/sbx/vm"
)

// Cluster is what several gateways sharing one database need from it
// (store/postgres has it): leases, so something every gateway notices is
// done by one, and notifications, so a change made through one gateway
// reaches the clients of every other.
type Cluster interface {
	// TryLease takes or renews the lease name for holder until ttl from
	// now and reports whether holder has it.
	TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives name up if holder has it.
	ReleaseLease(ctx context.Context, name, holder string) error
	Notify(ctx context.Context, channel, payload string) error
	Listen(ctx context.Context, channel string) (<-chan string, error)
}

// ClusterChannel is the notification channel of the fleet's events.
const ClusterChannel = "sbx_fleet"

// followTTL is how long a gateway holds the right to follow a box's turn
// (and end it) without renewing it: a gateway that dies hands its turns
// over to another within this.
const followTTL = 15 * time.Second

// poolTTL is how long a gateway's warm machine stays its own without a
// renewal (every tick renews it).
const poolTTL = 2 * time.Minute

func poolLease(vmName string) string { return "pool/" + vmName }

// staleSetup is how long a box may stay creating on a cluster before it
// counts as abandoned by the gateway that set it up.
const staleSetup = 10 * time.Minute

// timerTTL keeps the lease of one firing of a lifecycle timer: long past
// the action, so no other gateway repeats it.
const timerTTL = 10 * time.Minute

// boxLockTTL bounds how long a dead gateway's action can hold a box.
const boxLockTTL = 30 * time.Second

// leases is this gateway's side of the cluster's leases: who acts on what
// every gateway notices. Without a cluster this gateway is alone and every
// lease is its own.
type leases struct {
	cluster Cluster // nil: the only gateway
	id      string  // this gateway among the cluster's
	log     *slog.Logger
}

// on reports whether this gateway shares the boxes with others.
func (l *leases) on() bool { return l.cluster != nil }

// once reports whether this gateway is the one to act on key (always
// without a cluster).
func (l *leases) once(ctx context.Context, key string, ttl time.Duration) bool {
	if l.cluster == nil {
		return true
	}
	return LeaseOnce(l.cluster, l.id, l.log)(ctx, key, ttl)
}

// LeaseOnce is the vm.Once of gateway id among c's: it acts on key when it
// takes or holds key's lease; a lease it cannot ask for is a no (logged).
func LeaseOnce(c Cluster, id string, log *slog.Logger) vm.Once {
	return func(ctx context.Context, key string, ttl time.Duration) bool {
		ok, err := c.TryLease(ctx, key, id, ttl)
		if err != nil {
			log.Warn("lease", "lease", key, "err", err)
			return false
		}
		return ok
	}
}

// lockBox takes the box's lock across gateways (a lease), waiting up to
// boxLockTTL, so two users' actions on one box through two gateways run
// one after the other, as they do through one. m is held: within this
// gateway the lease's holder (its id) is alone.
func (l *leases) lockBox(ctx context.Context, m *boxMutex, name string) error {
	if l.cluster == nil {
		return nil
	}
	key := boxLockKey(name)
	ctx, cancel := context.WithTimeout(ctx, boxLockTTL)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		ok, err := l.cluster.TryLease(ctx, key, l.id, boxLockTTL)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("lock box %q across gateways: %w: %w", name, err, ErrUnavailable)
		}
		if ok {
			m.release = l.releaser(ctx, key, name)
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("box %q is busy with an action through another gateway: %w", name, ErrUnavailable)
		}
	}
}

// tryLockBox takes the box's lease across gateways for m if it is free,
// without waiting.
func (l *leases) tryLockBox(ctx context.Context, m *boxMutex, name string) (bool, error) {
	if l.cluster == nil {
		return true, nil
	}
	key := boxLockKey(name)
	ok, err := l.cluster.TryLease(ctx, key, l.id, boxLockTTL)
	if err != nil || !ok {
		return false, err
	}
	m.release = l.releaser(ctx, key, name)
	return true, nil
}

// releaser gives a box's lease up, once.
func (l *leases) releaser(ctx context.Context, key, name string) func() {
	return func() {
		if err := l.cluster.ReleaseLease(context.WithoutCancel(ctx), key, l.id); err != nil {
			l.log.Warn("release box lock", "box", name, "err", err)
		}
	}
}

func boxLockKey(name string) string { return "box/" + name + "/lock" }

func followLease(name string) string { return "box/" + name + "/follow" }

// holdFollow keeps this gateway's lease on following a box's turn until
// ctx ends, cancelling the follower if another gateway took it over; then
// it gives the lease up.
func (l *leases) holdFollow(ctx context.Context, name string, cancel context.CancelFunc) {
	t := time.NewTicker(followTTL / 3)
	defer t.Stop()
	defer func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = l.cluster.ReleaseLease(rctx, followLease(name), l.id)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ok, err := l.cluster.TryLease(ctx, followLease(name), l.id, followTTL)
			if err == nil && !ok {
				l.log.Warn("another gateway follows this turn now", "box", name)
				cancel()
				return
			}
		}
	}
}

// notice is an event as it travels between gateways.
type notice struct {
	From  string    `json:"from"`
	Box   string    `json:"box"`
	Owner string    `json:"owner"`
	Kind  string    `json:"kind"`
	State State     `json:"state"`
	Note  string    `json:"note,omitempty"`
	At    time.Time `json:"at"`
}

// notify tells the other gateways of a cluster about e.
func (l *leases) notify(ctx context.Context, e Event) {
	n := notice{From: l.id, Box: e.Box, Owner: e.Owner, Kind: e.Kind, State: e.State, Note: e.Note.String(), At: e.At}
	b, err := json.Marshal(n)
	if err != nil {
		return
	}
	if len(b) > 7000 {
		n.Note = ""
		b, _ = json.Marshal(n)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.cluster.Notify(ctx, ClusterChannel, string(b)); err != nil {
		l.log.Warn("notify other gateways", "box", e.Box, "err", err)
	}
}

// listen relays the other gateways' events to this one's subscribers and
// keeps this gateway's copies of the logs its clients read up to date.
func (f *Fleet) listen(ch <-chan string) {
	defer f.bg.wg.Done()
	for payload := range ch {
		var n notice
		if err := json.Unmarshal([]byte(payload), &n); err != nil || n.From == f.leases.id {
			continue
		}
		f.events.local(Event{Box: n.Box, Owner: n.Owner, Kind: n.Kind, State: n.State, Note: f.red.String(n.Note), At: n.At})
		if n.Kind == EventRemoved {
			f.bg.wg.Go(func() { f.forget(n.Box) })
			continue
		}
		if (n.Kind == EventOutput || n.Kind == EventState) && f.logs.reading(n.Box) {
			f.logs.mirror(n.Box)
		}
	}
}

// forget drops this gateway's side of a box another gateway destroyed: its
// follower and mirror stop, readers of its log get io.EOF, its copy of the
// log goes.
func (f *Fleet) forget(name string) {
	if !f.locks.known(name) && !f.logs.reading(name) {
		return // nothing of it here
	}
	lock := f.locks.get(name)
	lock.Lock()
	defer lock.Unlock()
	if _, err := f.records.load(f.bg.ctx, name); err == nil {
		return // a new box of the same name already
	}
	f.runs.stop(name)
	f.locks.drop(name)
	f.logs.remove(name)
}
