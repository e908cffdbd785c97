package vm

import (
	"context"

	"sbx.dev/sbx/vm/agent"
)

// Dial connects to a TCP port on a running box's loopback (127.0.0.1 or
// ::1), over the box's agent connection: no network path is involved, on
// either backend. ctx bounds the dial only.
func (m *Manager) Dial(ctx context.Context, name string, d agent.DialRequest) (*agent.Conn, error) {
	if err := agent.CheckDial(d); err != nil {
		return nil, err
	}
	c, err := m.agent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Dial(ctx, d)
}
