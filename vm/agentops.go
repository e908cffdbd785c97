package vm

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"time"

	"sbx.dev/sbx/vm/agent"
)

// What the Manager does through a box's agent: its file calls, Exec and
// Watch, each through the box's live client (m.agent), and the session
// every boot or wake opens.

// Exec starts a process in a running box.
func (m *Manager) Exec(ctx context.Context, name string, req agent.ExecRequest) (*agent.Process, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Exec(ctx, req)
}

// Stat describes path under the box's /workspace.
func (m *Manager) Stat(ctx context.Context, name, path string) (agent.FileInfo, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return agent.FileInfo{}, err
	}
	return c.Stat(ctx, path)
}

// ReadDir lists a directory under the box's /workspace.
func (m *Manager) ReadDir(ctx context.Context, name, path string) ([]agent.FileInfo, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.ReadDir(ctx, path)
}

// ReadFile streams a file from the box's /workspace.
func (m *Manager) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.ReadFile(ctx, path)
}

// WriteFile writes r to path under the box's /workspace.
func (m *Manager) WriteFile(ctx context.Context, name, path string, mode fs.FileMode, r io.Reader) error {
	c, err := m.agent(ctx, name)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, path, mode, r)
}

// MkdirAll creates a directory path under the box's /workspace.
func (m *Manager) MkdirAll(ctx context.Context, name, path string, mode fs.FileMode) error {
	c, err := m.agent(ctx, name)
	if err != nil {
		return err
	}
	return c.MkdirAll(ctx, path, mode)
}

// Remove deletes path under the box's /workspace.
func (m *Manager) Remove(ctx context.Context, name, path string) error {
	c, err := m.agent(ctx, name)
	if err != nil {
		return err
	}
	return c.Remove(ctx, path)
}

// TarOut streams path under /workspace as a tar archive.
func (m *Manager) TarOut(ctx context.Context, name, path string) (io.ReadCloser, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.TarOut(ctx, path)
}

// TarIn unpacks a tar archive into dir under /workspace.
func (m *Manager) TarIn(ctx context.Context, name, dir string, r io.Reader) error {
	c, err := m.agent(ctx, name)
	if err != nil {
		return err
	}
	return c.TarIn(ctx, dir, r)
}

// Watch reports changes of path under /workspace until ctx ends.
func (m *Manager) Watch(ctx context.Context, name, path string) (<-chan agent.WatchEvent, error) {
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Watch(ctx, path)
}

// dialAgent opens an agent session to a box through the backend (the
// handshake included); its caller owns the client.
func (m *Manager) dialAgent(ctx context.Context, name string) (*agent.Client, error) {
	conn, err := m.backend.Connect(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("connect agent: %w", err)
	}
	cl, err := agent.Connect(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent handshake: %w", err)
	}
	return cl, nil
}

// readyAgent waits for the agent of a just launched machine (every boot or
// wake), then sets the guest's clock and reseeds its entropy (a restored
// snapshot has stale copies of both), and keeps the session as e's client.
// The two go on their own streams at once, so a wake waits for the slower
// only; their answers are the proof of life.
func (m *Manager) readyAgent(ctx context.Context, name string, e *entry) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout)
	defer cancel()
	m.dropClient(e)
	cl, err := m.dialAgent(ctx, name)
	if err != nil {
		return err
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	clockErr := make(chan error, 1)
	go func() { clockErr <- cl.SetClock(ctx, time.Now()) }()
	err = cl.Reseed(ctx, seed)
	if cerr := <-clockErr; cerr != nil {
		cl.Close()
		return fmt.Errorf("agent set clock: %w", cerr)
	}
	if err != nil {
		cl.Close()
		return fmt.Errorf("agent reseed: %w", err)
	}
	m.mu.Lock()
	e.client = cl
	m.mu.Unlock()
	return nil
}
