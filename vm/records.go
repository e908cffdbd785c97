package vm

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// RecordFiles is where a backend whose boxes are this host's own keeps
// their records (QEMU: a box.json in each box's directory).
type RecordFiles interface {
	// Save persists the box's record so a gateway restart finds it.
	Save(ctx context.Context, box Box) error
	// Recover returns every box the backend holds, re-adopting machines
	// that still run. A box whose machine is gone comes back Failed with the
	// reason; stray machines with no box are ended and logged.
	Recover(ctx context.Context) ([]Box, error)
	// Kill ends a machine at once (Driver.Kill).
	Kill(ctx context.Context, name string) error
}

// localRecords is the state authority of boxes no other gateway sees: the
// records live here, persisted through RecordFiles, and every change is
// one this Manager made.
type localRecords struct {
	files RecordFiles
	f     Follower

	mu    sync.Mutex
	boxes map[string]Box
	gen   map[string]int // bumped at every launch: a watcher of an older machine is stale
}

// LocalRecords recovers the records files holds and is their authority
// for one Manager: a box half-booted when the gateway stopped is ended so
// Start begins clean, a running one is followed again.
func LocalRecords(ctx context.Context, files RecordFiles, f Follower, log *slog.Logger) (Records, error) {
	boxes, err := files.Recover(ctx)
	if err != nil {
		return nil, err
	}
	r := &localRecords{files: files, f: f, boxes: map[string]Box{}, gen: map[string]int{}}
	for _, b := range boxes {
		r.boxes[b.Name] = b
	}
	for _, b := range boxes {
		switch b.State {
		case Running:
			r.Launched(b.Name)
		case Creating:
			if err := files.Kill(ctx, b.Name); err != nil {
				log.Warn("recover: end half-booted box", "box", b.Name, "err", err)
			}
		}
		f.Arm(b)
		log.Info("recover: box", "box", b.Name, "state", b.State, "reason", b.Reason)
	}
	return r, nil
}

func (r *localRecords) Get(name string) (Box, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[name]
	return b, ok
}

func (r *localRecords) List() []Box {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Box, 0, len(r.boxes))
	for _, b := range r.boxes {
		out = append(out, b)
	}
	return out
}

func (r *localRecords) Fresh(_ context.Context, name string) (Box, error) {
	if b, ok := r.Get(name); ok {
		return b, nil
	}
	return Box{}, fmt.Errorf("box %q: %w", name, ErrNotFound)
}

func (r *localRecords) Created(box Box) {
	r.mu.Lock()
	r.boxes[box.Name] = box
	r.mu.Unlock()
	r.f.Emit(Event{Box: box.Name, To: Creating})
}

func (r *localRecords) Save(ctx context.Context, from State, box Box) error {
	r.mu.Lock()
	if box.State == Destroyed {
		delete(r.boxes, box.Name)
		r.gen[box.Name]++
	} else {
		r.boxes[box.Name] = box
	}
	r.mu.Unlock()
	var err error
	if box.State != Destroyed {
		err = r.files.Save(ctx, box)
	}
	r.f.Emit(Event{Box: box.Name, From: from, To: box.State, Note: box.Reason, At: box.Updated})
	return err
}

func (r *localRecords) Launched(name string) {
	r.mu.Lock()
	r.gen[name]++
	g := r.gen[name]
	r.mu.Unlock()
	r.f.Watch(name, strconv.Itoa(g), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.gen[name] != g
	})
}

// Once is always yes: no other gateway sees these boxes.
func (r *localRecords) Once(context.Context, string, time.Duration) bool { return true }
