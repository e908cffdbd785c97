package vm

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// eventHub fans box state changes out to a Manager's subscribers. Each subscriber has a buffer of 256
// events; one that falls further behind loses the surplus (logged), never
// the emitter.
type eventHub struct {
	log    *slog.Logger
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
	done   chan struct{} // closed by Close
}

type subscriber struct {
	ch      chan Event
	dropped int
}

// newEventHub returns a hub that logs dropped events to log.
func newEventHub(log *slog.Logger) *eventHub {
	return &eventHub{log: log, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
}

// Subscribe streams events until ctx ends or the hub closes; the channel is
// closed then.
func (h *eventHub) Subscribe(ctx context.Context) <-chan Event {
	s := &subscriber{ch: make(chan Event, 256)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		close(s.ch)
		return s.ch
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-h.done:
		}
		h.mu.Lock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
		h.mu.Unlock()
	}()
	return s.ch
}

// Emit sends ev (At now when zero) to every subscriber without blocking.
func (h *eventHub) Emit(ev Event) {
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped++
			h.log.Warn("event subscriber too slow, event dropped", "box", ev.Box, "dropped", s.dropped)
		}
	}
}

// Close ends every subscription; later ones get a closed channel.
func (h *eventHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}
