package fleet

import (
	"context"
	"fmt"
	"sync"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

// locks is the way to a box: through the caller (a box they may not see is
// not found), and under its lock, so operations on one box run one after
// the other, through this gateway and, on a cluster, through every gateway.
type locks struct {
	records *records
	leases  *leases

	mu    sync.Mutex
	boxes map[string]*boxMutex
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

// get returns a box's lock, creating it.
func (l *locks) get(name string) *boxMutex {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.boxes[name]
	if m == nil {
		m = &boxMutex{}
		l.boxes[name] = m
	}
	return m
}

// known reports whether this gateway holds a lock of the box.
func (l *locks) known(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.boxes[name] != nil
}

// drop forgets a box's lock (the box is gone); its holder still unlocks it.
func (l *locks) drop(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.boxes, name)
}

// lock holds a box's lock here and across gateways.
func (l *locks) lock(ctx context.Context, name string) (*boxMutex, error) {
	m := l.get(name)
	m.Lock()
	if err := l.leases.lockBox(ctx, m, name); err != nil {
		m.Unlock()
		return nil, err
	}
	return m, nil
}

// tryLock takes a box's lock here and, on a cluster, its lease, waiting
// for neither: ok is false when either is held elsewhere (the lease's
// error, if any, says why). For a holder that must not block: one whose
// locker may be waiting for it to stop.
func (l *locks) tryLock(ctx context.Context, name string) (m *boxMutex, ok bool, err error) {
	m = l.get(name)
	if !m.TryLock() {
		return nil, false, nil
	}
	if ok, err := l.leases.tryLockBox(ctx, m, name); !ok {
		m.Unlock()
		return nil, false, err
	}
	return m, true, nil
}

// resolve loads a box through the caller: a box they may not see is
// ErrNotFound, worded exactly like a box that does not exist.
func (l *locks) resolve(ctx context.Context, caller keys.Actor, name string) (record, error) {
	if err := vm.ValidName(name); err != nil {
		return record{}, fmt.Errorf("box %q: %w", name, ErrInvalid)
	}
	rec, err := l.records.load(ctx, name)
	if err != nil {
		return record{}, err
	}
	if !canSee(caller, rec.Owner) || rec.State == Destroyed {
		return record{}, notFound(name)
	}
	return rec, nil
}

// lockBox resolves a box and holds its lock; the record is re-read under
// the lock so the caller acts on the latest state.
func (l *locks) lockBox(ctx context.Context, caller keys.Actor, name string) (record, *boxMutex, error) {
	if _, err := l.resolve(ctx, caller, name); err != nil {
		return record{}, nil, err
	}
	lock, err := l.lock(ctx, name)
	if err != nil {
		return record{}, nil, err
	}
	rec, err := l.resolve(ctx, caller, name)
	if err != nil {
		lock.Unlock()
		return record{}, nil, err
	}
	return rec, lock, nil
}

// canSee is the one ownership rule: owners see their boxes, admins all.
func canSee(caller keys.Actor, owner string) bool {
	return caller.Role == keys.RoleAdmin || (caller.User != "" && caller.User == owner)
}
