package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"charm.land/ssh"
	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/fleet"
)

// loginShell is attach's default: bash when the image has it, else sh.
var loginShell = []string{"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"}

// execUser is who a shell or command of exec and attach runs as: the box's
// unprivileged agent user, as the agent itself does, unless --root asks
// for root (the audit row says which).
func execUser(root bool) string {
	if root {
		return ""
	}
	return fleet.AgentUser
}

const rootUsage = "run as root instead of the box's unprivileged agent user (audited)"

func (c *call) attachCmd() *cobra.Command {
	var root bool
	cmd := &cobra.Command{
		Use:     "attach [--root] BOX [-- CMD…]",
		Short:   "A shell (or CMD) in the box on a raw terminal, as the agent user (--root: as root); needs ssh -t",
		Example: c.examples("-t attach fix-the-flaky-3f2a1c", "-t attach --root fix-the-flaky-3f2a1c -- apt-get install -y jq"),
		// Its output is the box process's own bytes: no --json.
		Annotations: map[string]string{annotationRaw: "true"},
		GroupID:     groupBoxes,
		Args:        cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pty, _, isPty := c.sess.Pty()
			if !isPty {
				return fmt.Errorf("attach needs a terminal: run ssh with -t (or use exec for pipes): %w", fleet.ErrInvalid)
			}
			argv, err := commandAfterBox(cmd, args)
			if err != nil {
				return err
			}
			if argv == nil {
				argv = loginShell
			}
			req := fleet.ExecRequest{Argv: argv, TTY: true, User: execUser(root),
				Rows: clampWin(pty.Window.Height), Cols: clampWin(pty.Window.Width)}
			if pty.Term != "" {
				req.Env = []string{"TERM=" + pty.Term}
			}
			return c.runProcess(cmd, args[0], req)
		},
	}
	cmd.Flags().BoolVar(&root, "root", false, rootUsage)
	return cmd
}

func (c *call) execCmd() *cobra.Command {
	var root bool
	cmd := &cobra.Command{
		Use:         "exec [--root] BOX -- CMD…",
		Short:       "Run CMD in the box with stdin, stdout and stderr piped (for scripts), as the agent user (--root: as root)",
		Example:     c.examples("exec fix-the-flaky-3f2a1c -- go test ./...", "exec fix-the-flaky-3f2a1c -- tar -C /workspace -cz . > ws.tgz"),
		Annotations: map[string]string{annotationRaw: "true"},
		GroupID:     groupBoxes,
		Args:        cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := commandAfterBox(cmd, args)
			if err != nil {
				return err
			}
			if argv == nil {
				return fmt.Errorf("exec: no command after the box: %w", fleet.ErrInvalid)
			}
			return c.runProcess(cmd, args[0], fleet.ExecRequest{Argv: argv, User: execUser(root)})
		},
	}
	cmd.Flags().BoolVar(&root, "root", false, rootUsage)
	return cmd
}

// commandAfterBox is the command after BOX: everything after "--", or the
// remaining arguments when there is no "--"; nil for none.
func commandAfterBox(cmd *cobra.Command, args []string) ([]string, error) {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 1:
		return args[1:], nil
	case dash < 0 || dash == len(args):
		return nil, nil
	case dash != 1:
		return nil, fmt.Errorf("%s BOX -- CMD…: one box before --, got %d arguments: %w", cmd.Name(), dash, fleet.ErrInvalid)
	}
	return args[1:], nil
}

func clampWin(n int) uint16 {
	return uint16(min(max(n, 1), 1<<15))
}

// runProcess starts req in box and connects it to the session: stdin in,
// stdout (stderr without a TTY) out through the raw channel, window
// changes and signals forwarded, the exit status returned to the client.
func (c *call) runProcess(cmd *cobra.Command, box string, req fleet.ExecRequest) error {
	f, err := c.fleet()
	if err != nil {
		return err
	}
	ch := c.srv.channelOf(c.sess)
	if ch == nil {
		return errors.New("session channel state missing") // never: every session is registered
	}
	ctx := cmd.Context()
	stderr := c.sess.Stderr()
	if b, err := f.Get(ctx, c.actor, box); err != nil {
		return err
	} else if b.State == fleet.Sleeping {
		fmt.Fprintf(stderr, "Waking box %s…\n", box)
	}
	ch.wantSignals.Store(true)
	defer ch.wantSignals.Store(false)
	p, err := f.Exec(ctx, c.actor, box, req)
	if err != nil {
		return err
	}
	if p.Woke {
		fmt.Fprintf(stderr, "box %s is awake\n", box)
	}

	// The process's context outlives the session's by nothing: a client
	// that goes away hangs the process up, as sshd does.
	procCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Signal(procCtx, syscall.SIGHUP)
			if !req.TTY {
				_ = p.Signal(procCtx, syscall.SIGTERM)
			}
		case <-procCtx.Done():
		}
	}()
	go func() {
		_, _ = io.Copy(p.Stdin(), c.sess)
		_ = p.Stdin().Close() // the client's EOF (half-close) is the process's
	}()
	if req.TTY {
		go func() {
			for w := range c.srv.Windows(c.sess) {
				_ = p.Resize(procCtx, clampWin(w.Height), clampWin(w.Width))
			}
		}()
	}
	go func() {
		for {
			select {
			case name := <-ch.signals:
				if sig, ok := sshSignals[ssh.Signal(name)]; ok {
					_ = p.Signal(procCtx, sig)
				}
			case <-procCtx.Done():
				return
			}
		}
	}()
	var out sync.WaitGroup
	out.Go(func() { _, _ = io.Copy(ch.raw, p.Stdout()) })
	out.Go(func() { _, _ = io.Copy(ch.raw.Stderr(), p.Stderr()) })
	out.Wait()
	st, err := p.Wait()
	if err != nil {
		return fmt.Errorf("box %s: %w", box, err)
	}
	// A signal's death is 128+n, not an exit-signal request: OpenSSH's
	// client turns that into its own status 255.
	c.exit = exitCode(st)
	return nil
}

// sshSignals maps RFC 4254 signal names to the guest's.
var sshSignals = map[ssh.Signal]syscall.Signal{
	ssh.SIGABRT: syscall.SIGABRT, ssh.SIGALRM: syscall.SIGALRM, ssh.SIGFPE: syscall.SIGFPE,
	ssh.SIGHUP: syscall.SIGHUP, ssh.SIGILL: syscall.SIGILL, ssh.SIGINT: syscall.SIGINT,
	ssh.SIGKILL: syscall.SIGKILL, ssh.SIGPIPE: syscall.SIGPIPE, ssh.SIGQUIT: syscall.SIGQUIT,
	ssh.SIGSEGV: syscall.SIGSEGV, ssh.SIGTERM: syscall.SIGTERM, ssh.SIGUSR1: syscall.SIGUSR1,
	ssh.SIGUSR2: syscall.SIGUSR2,
}

// exitCode is a process's status as a shell reports it: 128+n when signal
// n killed it.
func exitCode(st fleet.ExitStatus) int {
	if st.Code >= 0 {
		return st.Code
	}
	if n := unix.SignalNum(st.Signal); n != 0 { // the guest says "SIGTERM"
		return 128 + int(n)
	}
	for _, sig := range sshSignals {
		if sig.String() == st.Signal {
			return 128 + int(sig)
		}
	}
	return 255
}

// keepAlive keeps a quiet but live session (logs -f, attach, new while the
// box boots) from the idle timeout: the connection's deadline moves on
// traffic, so it sends a keepalive request (the client answers) every third
// of the timeout. A dead client never answers and is still cut.
func (s *Server) keepAlive(ctx context.Context, sess ssh.Session) (stop func()) {
	conn, ok := sess.Context().Value(ssh.ContextKeyConn).(gossh.Conn)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	every := max(s.IdleTimeout/3, 100*time.Millisecond)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, _, err := conn.SendRequest("keepalive@openssh.com", true, nil); err != nil {
					return
				}
			}
		}
	}()
	return cancel
}
