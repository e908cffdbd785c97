package agent

import (
	"context"

	"github.com/hashicorp/yamux"
)

// What the end-to-end tests (package agent_test, which start the guest's
// real server from vm/guest/agentd) look at inside the client.

const (
	OutLimit   = outLimit
	HelloMagic = helloMagic
	HelloLen   = helloLen
	NonceLen   = nonceLen
	CodeOther  = codeOther
)

// ExecStream is the one stream of a one-stream exec, nil for a four-stream one.
func (p *Process) ExecStream() *yamux.Stream { return p.st }

// ControlStream is the control stream of a four-stream exec.
func (p *Process) ControlStream() *yamux.Stream { return p.ctl }

// StdoutBuffered is how much stdout the host holds unread.
func (p *Process) StdoutBuffered() int { return p.out.buffered() }

// Exited is closed once the process's exit status has arrived.
func (p *Process) Exited() <-chan struct{} { return p.done }

// ID is the exec's call id.
func (p *Process) ID() uint64 { return p.id }

// OldExec reports whether the client fell back to the four-stream exec.
func (c *Client) OldExec() bool { return c.oldExec.Load() }

// Simple makes one call that is answered by one reply.
func (c *Client) Simple(ctx context.Context, req Request) (Reply, error) { return c.simple(ctx, req) }

// OpenStreams is the number of yamux streams open on the connection.
func (c *Client) OpenStreams() int { return c.sess.NumStreams() }

// SetOldExec makes the client use the four-stream exec (or not).
func (c *Client) SetOldExec(old bool) { c.oldExec.Store(old) }

// Err is the error the host makes of a wire error.
func (w *wireError) Err(op, path string) error { return w.err(op, path) }
