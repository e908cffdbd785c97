package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
)

// The scripted core's checkpoints keep only the list; the real ones run
// in sshd's TestCheckpointRewindFork and the vm conformance suite.

func (c *scriptedCore) Checkpoint(_ context.Context, caller keys.Actor, name, label string) (fleet.Checkpoint, error) {
	label = strings.TrimSpace(label)
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Checkpoint{}, err
	}
	if err := vm.ValidCheckpointLabel(label); err != nil {
		return fleet.Checkpoint{}, err
	}
	cp := fleet.Checkpoint{ID: fmt.Sprintf("cp-test%04d", len(b.checkpoints)), Label: label, Created: time.Now(), Bytes: 3 << 20}
	b.checkpoints = append(b.checkpoints, cp)
	return cp, nil
}

func (c *scriptedCore) Checkpoints(_ context.Context, caller keys.Actor, name string) ([]fleet.Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return nil, err
	}
	return append([]fleet.Checkpoint{}, b.checkpoints...), nil
}

func (c *scriptedCore) Rewind(_ context.Context, caller keys.Actor, name, id string) (fleet.Box, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return fleet.Box{}, err
	}
	if err := vm.ValidCheckpointID(id); err != nil {
		return fleet.Box{}, err
	}
	for _, cp := range b.checkpoints {
		if cp.ID == id {
			b.box.State = fleet.Done
			return b.box, nil
		}
	}
	return fleet.Box{}, fmt.Errorf("box %q has no checkpoint %q: %w", name, id, vm.ErrNoCheckpoint)
}

func (c *scriptedCore) Fork(_ context.Context, caller keys.Actor, name, task string) (fleet.Box, error) {
	c.mu.Lock()
	b, err := c.box(caller, name)
	if err != nil {
		c.mu.Unlock()
		return fleet.Box{}, err
	}
	src := b.box
	c.mu.Unlock()
	if task == "" {
		task = src.Task.String()
	}
	fork := name + "-fork"
	c.add(fork, caller.User, task, "", time.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boxes[fork].box, nil
}

func (c *scriptedCore) DeleteCheckpoint(_ context.Context, caller keys.Actor, name, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.box(caller, name)
	if err != nil {
		return err
	}
	if err := vm.ValidCheckpointID(id); err != nil {
		return err
	}
	for i, cp := range b.checkpoints {
		if cp.ID == id {
			b.checkpoints = append(b.checkpoints[:i], b.checkpoints[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("box %q has no checkpoint %q: %w", name, id, vm.ErrNoCheckpoint)
}
