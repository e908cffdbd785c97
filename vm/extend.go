package vm

import (
	"context"
	"fmt"
	"time"
)

// SetMaxDuration changes a box's max duration (still counted from its first
// start) and moves its timer: on this gateway at once, on the others that
// share the records when their timer fires and finds the later deadline.
// The box must hold a machine (creating, running or sleeping); a deadline
// already past ends it as the timer would.
func (m *Manager) SetMaxDuration(ctx context.Context, name string, d time.Duration) (Box, error) {
	if d <= 0 {
		return Box{}, fmt.Errorf("box %q: max duration %v: must be positive", name, d)
	}
	e, box, err := m.lock(ctx, name)
	if err != nil {
		return Box{}, err
	}
	defer e.op.Unlock()
	if !holdsMachine(box.State) {
		return Box{}, fmt.Errorf("box %q: %w: it is %s", name, ErrState, box.State)
	}
	box.Spec.MaxDuration = d
	box.Updated = time.Now().UTC()
	if err := m.records.Save(ctx, box.State, box); err != nil {
		return Box{}, fmt.Errorf("box %q: save the max duration: %w", name, err)
	}
	m.log.Info("box max duration", "box", name, "max_duration", d, "deadline", box.Deadline())
	m.arm(box)
	return box, nil
}
