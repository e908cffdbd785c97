package fleet

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// Test hooks of the notification tests on hosts without machines: they
// change a box's record the way the core's runs and timers do (the same
// records.transition, audit row and event), without a machine under it.

// PublishForTest publishes an event of kind about a box as the core's own
// parts do (the pull-request watcher publishes EventPRChecks this way).
func (f *Fleet) PublishForTest(ctx context.Context, box, kind, note string) error {
	rec, err := f.records.load(ctx, box)
	if err != nil {
		return err
	}
	f.events.emit(rec, kind, note)
	return nil
}

// AddBoxForTest records a running box of owner, as delegate does before
// its first turn.
func (f *Fleet) AddBoxForTest(ctx context.Context, owner, name, task string) error {
	now := f.now()
	rec := record{Name: name, Owner: owner, Agent: "script", Task: task, State: Running, Created: now, Updated: now, Turn: 1}
	d, err := doc(rec)
	if err != nil {
		return err
	}
	e := f.entry(system(), "box.create", name)
	if err := f.store.InsertBox(ctx, d, e); err != nil {
		return err
	}
	f.events.emit(rec, EventState, "")
	return nil
}

// TransitionForTest moves a box to state as the core does: a question
// makes it waiting (and publishes the question), done ends the turn,
// sleeping notes when, running starts the next turn, failed says why.
func (f *Fleet) TransitionForTest(ctx context.Context, name string, to State, text string) error {
	lock := f.locks.get(name)
	lock.Lock()
	defer lock.Unlock()
	rec, err := f.records.load(ctx, name)
	if err != nil {
		return err
	}
	switch to {
	case Waiting:
		rec.Question, rec.TurnDone = text, true
		if err := f.records.transition(ctx, &rec, Waiting, system(), "box.question", ""); err != nil {
			return err
		}
		f.events.emit(rec, EventQuestion, text)
		return nil
	case Running:
		rec.Question, rec.TurnDone = "", false
		rec.Turn++
	case Done:
		rec.TurnDone = true
	case Sleeping:
		rec.StateBeforeSleep, rec.SleptAt = rec.State, f.now()
	case Failed:
		rec.Reason = text
	}
	rec.Updated = time.Time{}
	return f.records.transition(ctx, &rec, to, system(), "box."+string(to), text)
}

// MaxAllow is the most entries a box's allow-list holds.
const MaxAllow = maxAllow

// GatewayLocks is one gateway's box locks over cluster, as endTurn and
// every action take them.
type GatewayLocks struct{ l *locks }

func NewGatewayLocks(cluster Cluster, id string) GatewayLocks {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	return GatewayLocks{&locks{leases: &leases{cluster: cluster, id: id, log: lg}, boxes: map[string]*boxMutex{}}}
}

// Lock waits for the box's lock (an action's way).
func (g GatewayLocks) Lock(ctx context.Context, name string) (func(), error) {
	m, err := g.l.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

// TryLock is endTurn's way: never waits.
func (g GatewayLocks) TryLock(ctx context.Context, name string) (func(), bool, error) {
	m, ok, err := g.l.tryLock(ctx, name)
	if !ok {
		return nil, false, err
	}
	return m.Unlock, true, nil
}

// LocalFree reports whether this gateway's own lock of the box is free.
func (g GatewayLocks) LocalFree(name string) bool {
	m := g.l.get(name)
	if !m.TryLock() {
		return false
	}
	m.Unlock()
	return true
}
