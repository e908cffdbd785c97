package vm

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"net"
	"time"

	"sbx.dev/sbx/vm/agent"
)

// AgentOps is what the Manager does through a box's agent once it has a
// live client for it.
type AgentOps struct {
	// Client returns a live agent client for a running box, or why not.
	Client func(ctx context.Context, name string) (*agent.Client, error)
}

// Exec starts a process in a running box.
func (a AgentOps) Exec(ctx context.Context, name string, req agent.ExecRequest) (*agent.Process, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Exec(ctx, req)
}

// Stat describes path under the box's /workspace.
func (a AgentOps) Stat(ctx context.Context, name, path string) (agent.FileInfo, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return agent.FileInfo{}, err
	}
	return c.Stat(ctx, path)
}

// ReadDir lists a directory under the box's /workspace.
func (a AgentOps) ReadDir(ctx context.Context, name, path string) ([]agent.FileInfo, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.ReadDir(ctx, path)
}

// ReadFile streams a file from the box's /workspace.
func (a AgentOps) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.ReadFile(ctx, path)
}

// WriteFile writes r to path under the box's /workspace.
func (a AgentOps) WriteFile(ctx context.Context, name, path string, mode fs.FileMode, r io.Reader) error {
	c, err := a.Client(ctx, name)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, path, mode, r)
}

// MkdirAll creates a directory path under the box's /workspace.
func (a AgentOps) MkdirAll(ctx context.Context, name, path string, mode fs.FileMode) error {
	c, err := a.Client(ctx, name)
	if err != nil {
		return err
	}
	return c.MkdirAll(ctx, path, mode)
}

// Remove deletes path under the box's /workspace.
func (a AgentOps) Remove(ctx context.Context, name, path string) error {
	c, err := a.Client(ctx, name)
	if err != nil {
		return err
	}
	return c.Remove(ctx, path)
}

// TarOut streams path under /workspace as a tar archive.
func (a AgentOps) TarOut(ctx context.Context, name, path string) (io.ReadCloser, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.TarOut(ctx, path)
}

// TarIn unpacks a tar archive into dir under /workspace.
func (a AgentOps) TarIn(ctx context.Context, name, dir string, r io.Reader) error {
	c, err := a.Client(ctx, name)
	if err != nil {
		return err
	}
	return c.TarIn(ctx, dir, r)
}

// Watch reports changes of path under /workspace until ctx ends.
func (a AgentOps) Watch(ctx context.Context, name, path string) (<-chan agent.WatchEvent, error) {
	c, err := a.Client(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Watch(ctx, path)
}

// Connector opens a stream to a box's agent port (vm.Backend has it).
type Connector interface {
	Connect(ctx context.Context, name string) (net.Conn, error)
}

// DialAgent opens an agent session to a box through c (the handshake
// included); its caller owns the client.
func DialAgent(ctx context.Context, c Connector, name string) (*agent.Client, error) {
	conn, err := c.Connect(ctx, name)
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

// ReadyAgent is what a manager does after every boot or wake: a session to
// the box's agent that has set the guest's clock and reseeded its entropy
// (a restored snapshot has stale copies of both). The two go on their own
// streams at once, so a wake waits for the slower only; their answers are
// the proof of life.
func ReadyAgent(ctx context.Context, c Connector, name string) (*agent.Client, error) {
	cl, err := DialAgent(ctx, c, name)
	if err != nil {
		return nil, err
	}
	seed := make([]byte, 64)
	rand.Read(seed)
	clockErr := make(chan error, 1)
	go func() { clockErr <- cl.SetClock(ctx, time.Now()) }()
	err = cl.Reseed(ctx, seed)
	if cerr := <-clockErr; cerr != nil {
		cl.Close()
		return nil, fmt.Errorf("agent set clock: %w", cerr)
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("agent reseed: %w", err)
	}
	return cl, nil
}
