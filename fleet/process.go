package fleet

import (
	"context"
	"io"
	"syscall"

	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
)

// Process is a process started in a box by Exec. Its output passes the
// redactor as it streams (held back only while it could still begin a
// secret, released at the next line end); its input goes in untouched.
type Process struct {
	// Woke is true when Exec had to wake the box first.
	Woke   bool
	p      *agent.Process
	stdout *redact.Reader
	stderr *redact.Reader
}

func newProcess(r *redact.Redactor, p *agent.Process, woke bool) *Process {
	return &Process{Woke: woke, p: p, stdout: r.NewReader(p.Stdout()), stderr: r.NewReader(p.Stderr())}
}

// PID is the process id in the guest.
func (p *Process) PID() int { return p.p.PID() }

// Stdin is the process's input; Close sends EOF (^D on a TTY).
func (p *Process) Stdin() io.WriteCloser { return p.p.Stdin() }

// Stdout is the process's output (the TTY's, with a TTY), redacted.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr is the process's error output, redacted (empty with a TTY).
func (p *Process) Stderr() io.Reader { return p.stderr }

// Resize changes the TTY's window size.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.p.Resize(ctx, rows, cols)
}

// Signal delivers sig to the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.p.Signal(ctx, sig)
}

// Wait returns the exit status once the process ended and its output was
// read to the end.
func (p *Process) Wait() (agent.ExitStatus, error) { return p.p.Wait() }
