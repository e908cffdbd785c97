package fleet

import (
	"context"
	"sync"
	"time"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

// events fans the boxes' changes out to every subscriber of this gateway
// and, on a cluster, to the other gateways. One publisher call costs one
// non-blocking send per subscriber; a subscriber that falls behind its
// buffer loses the surplus (and a counter says so), never the core.
type events struct {
	red    *redact.Redactor
	now    func() time.Time
	leases *leases
	bg     *background

	mu      sync.Mutex
	subs    map[*sub]struct{}
	dropped int64
}

type sub struct {
	caller keys.Actor
	ch     chan Event
}

// subBuffer is how many events a subscriber may fall behind.
const subBuffer = 256

// local publishes e to this gateway's subscribers.
func (h *events) local(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if !canSee(s.caller, e.Owner) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			h.dropped++
		}
	}
}

// publish tells this gateway's subscribers and, on a cluster, every other
// gateway's.
func (h *events) publish(e Event) {
	h.local(e)
	if h.leases.on() {
		h.leases.notify(h.bg.ctx, e)
	}
}

// emit publishes an event about rec.
func (h *events) emit(rec record, kind, note string) {
	h.publish(Event{Box: rec.Name, Owner: rec.Owner, Kind: kind, State: rec.State, Note: h.red.String(note), At: h.now()})
}

// subscribe streams the events caller may see until ctx or the core ends.
func (h *events) subscribe(ctx context.Context, caller keys.Actor) <-chan Event {
	s := &sub{caller: caller, ch: make(chan Event, subBuffer)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	out := make(chan Event)
	done := h.bg.ctx.Done()
	go func() {
		defer close(out)
		defer func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case e := <-s.ch:
				select {
				case out <- e:
				case <-ctx.Done():
					return
				case <-done:
					return
				}
			}
		}
	}()
	return out
}
