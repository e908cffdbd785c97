package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
)

// hub fans events out to every subscriber. One publisher call costs one
// non-blocking send per subscriber; a subscriber that falls behind its
// buffer loses the surplus (and a counter says so), never the core.
type hub struct {
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

func (h *hub) init() { h.subs = map[*sub]struct{}{} }

func (h *hub) publish(e Event) {
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

func (f *Fleet) events(ctx context.Context, caller keys.Actor) <-chan Event {
	s := &sub{caller: caller, ch: make(chan Event, subBuffer)}
	f.hub.mu.Lock()
	f.hub.subs[s] = struct{}{}
	f.hub.mu.Unlock()
	out := make(chan Event)
	go func() {
		defer close(out)
		defer func() {
			f.hub.mu.Lock()
			delete(f.hub.subs, s)
			f.hub.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.ctx.Done():
				return
			case e := <-s.ch:
				select {
				case out <- e:
				case <-ctx.Done():
					return
				case <-f.ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// emit publishes an event about rec.
func (f *Fleet) emit(rec record, kind, note string) {
	f.publish(Event{Box: rec.Name, Owner: rec.Owner, Kind: kind, State: rec.State, Note: f.red.String(note), At: f.now()})
}

// load reads a box's record.
func (f *Fleet) load(ctx context.Context, name string) (record, error) {
	doc, err := f.store.GetBox(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return record{}, notFound(name)
	}
	if err != nil {
		return record{}, fmt.Errorf("load box %q: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal(doc.Doc, &rec); err != nil {
		return record{}, fmt.Errorf("load box %q: corrupt record: %w", name, err)
	}
	return rec, nil
}

func (f *Fleet) loadAll(ctx context.Context) ([]record, error) {
	docs, err := f.store.ListBoxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	out := make([]record, 0, len(docs))
	for _, d := range docs {
		var rec record
		if err := json.Unmarshal(d.Doc, &rec); err != nil {
			f.log.Error("corrupt box record", "box", d.Name, "err", err)
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

func doc(rec record) (BoxDoc, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return BoxDoc{}, err
	}
	return BoxDoc{Name: rec.Name, Owner: rec.Owner, State: string(rec.State), Doc: b}, nil
}

// save writes rec with its audit row (zero Entry: bookkeeping only) and
// publishes a state event when the state changed.
func (f *Fleet) save(ctx context.Context, rec record, e audit.Entry) error {
	prev := rec.State
	if old, err := f.load(ctx, rec.Name); err == nil {
		prev = old.State
	}
	rec.Updated = f.now()
	d, err := doc(rec)
	if err != nil {
		return err
	}
	if err := f.store.UpdateBox(ctx, d, e); err != nil {
		return fmt.Errorf("save box %q: %w", rec.Name, err)
	}
	if e.Action != "" {
		f.audit.Finish(ctx, e, nil, "")
	}
	if prev != rec.State {
		f.emit(rec, EventState, rec.Reason)
	}
	return nil
}

// transition moves a box to state, recorded as action by actor.
func (f *Fleet) transition(ctx context.Context, rec *record, to State, actor keys.Actor, action, detail string) error {
	rec.State = to
	e := audit.Entry{}
	if action != "" {
		e = f.entry(actor, action, rec.Name)
		e.Detail = detail
	}
	return f.save(ctx, *rec, e)
}
