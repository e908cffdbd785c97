package fleet

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/redact"
	"sbx.dev/sbx/vm/agent"
)

// ExecRequest is a process to start in a box (Exec). The core's own type:
// no front needs the guest protocol's.
type ExecRequest struct {
	Argv []string
	Env  []string // KEY=VALUE, added to the box's defaults
	Dir  string   // relative to /workspace; default /workspace
	TTY  bool
	Rows uint16
	Cols uint16
	// User is "" for root or AgentUser for the box's unprivileged user.
	User string
}

// AgentUser is ExecRequest.User for the box's unprivileged user, the one
// the agent runs as.
const AgentUser = agent.AgentUser

// ExitStatus is how a process ended: Code is -1 when a signal killed it.
type ExitStatus struct {
	Code   int
	Signal string // e.g. "interrupt", "killed"
}

// Stats is a box's CPU and memory use (Stats).
type Stats struct {
	// CPUPercent is the box's CPU use since the previous sample (100 = one
	// full core).
	CPUPercent float64 `json:"cpu_percent"`
	// PrivateBytes is memory only this box uses.
	PrivateBytes int64 `json:"private_bytes"`
}

// WorkspacePath cleans a path the caller means under a box's /workspace
// (absolute there, or relative to it) to its form relative to /workspace,
// or refuses it (escapes, NUL, not valid UTF-8).
func WorkspacePath(p string) (string, error) { return agent.Rel(p) }

func (r ExecRequest) wire() agent.ExecRequest {
	return agent.ExecRequest{Argv: r.Argv, Env: r.Env, Dir: r.Dir, TTY: r.TTY, Rows: r.Rows, Cols: r.Cols, User: r.User}
}

// Process is a process started in a box by Exec. Its output passes the
// redactor as it streams (held back only while it could still begin a
// secret, released at the next line end); its input goes in untouched.
type Process struct {
	// Woke is true when Exec had to wake the box first.
	Woke   bool
	p      *agent.Process
	stdout io.Reader
	stderr io.Reader
}

func newProcess(r *redact.Redactor, p *agent.Process, woke, tty bool) *Process {
	out := io.Reader(r.NewReader(p.Stdout()))
	if tty {
		out = interactive(r, p.Stdout(), ttyQuiet)
	}
	return &Process{Woke: woke, p: p, stdout: out, stderr: r.NewReader(p.Stderr())}
}

// ttyQuiet is how long a terminal's output may pause before bytes the
// redactor holds back (they could begin a secret) are released: long enough
// that a secret printed in one piece is whole, short enough that typing
// echoes at once.
const ttyQuiet = 25 * time.Millisecond

// interactive redacts a terminal's output like a stream, and when the
// output pauses for quiet it releases what is held back, so a keystroke's
// echo (a lone "g" could begin "ghp_") does not wait for the next line end.
func interactive(r *redact.Redactor, src io.Reader, quiet time.Duration) io.Reader {
	pr, pw := io.Pipe()
	var mu sync.Mutex
	w := r.NewWriter(pw)
	flush := func() {
		mu.Lock()
		defer mu.Unlock()
		_ = w.Flush()
	}
	var timer *time.Timer
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			mu.Lock()
			if n > 0 {
				_, _ = w.Write(buf[:n])
			}
			if err != nil {
				_ = w.Close()
				mu.Unlock()
				if timer != nil {
					timer.Stop()
				}
				if errors.Is(err, io.EOF) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
			if w.Held() > 0 {
				if timer == nil {
					timer = time.AfterFunc(quiet, flush)
				} else {
					timer.Reset(quiet)
				}
			}
			mu.Unlock()
		}
	}()
	return pr
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
func (p *Process) Wait() (ExitStatus, error) {
	st, err := p.p.Wait()
	return ExitStatus{Code: st.Code, Signal: st.Signal}, err
}
