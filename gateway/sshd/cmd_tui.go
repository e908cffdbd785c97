package sshd

import (
	"fmt"

	"sbx.dev/sbx/gateway/sshd/tui"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/internal/termtext"
)

// tui serves a session without a command: the fleet TUI on a PTY, a short
// banner without one.
func (c *call) tui() int {
	pty, _, isPty := c.sess.Pty()
	if !isPty || c.srv.Fleet == nil {
		fmt.Fprintf(c.sess, "sbx: signed in as %s (%s). Run `ssh -t …` for the fleet TUI, or `%s help` for the commands.\n",
			termtext.String(c.user.Name), c.user.Role, c.usagePrefix())
		if isPty { // asked for the TUI, which needs boxes
			err := c.srv.noFleet()
			fmt.Fprintln(c.sess.Stderr(), "error: "+termtext.String(err.Error()))
			return errkind.ExitCode(err)
		}
		return 0
	}
	ctx := c.sess.Context()
	sizes := make(chan tui.Size)
	go func() {
		defer close(sizes)
		for w := range c.srv.Windows(c.sess) {
			select {
			case sizes <- tui.Size{Width: w.Width, Height: w.Height}:
			case <-ctx.Done():
				return
			}
		}
	}()
	// The PTY's TERM goes last so it wins over an env request's: the
	// library's Environ holds only what the client sent with env (NO_COLOR
	// among them, if the client's SendEnv or SetEnv passes it).
	env := append(c.sess.Environ(), "TERM="+pty.Term)
	err := tui.Run(ctx, tui.Options{
		Fleet: c.srv.Fleet, Caller: c.actor,
		In: c.sess, Out: c.sess, // the emulated PTY maps \n to \r\n, as the renderer expects
		Env: env, Width: pty.Window.Width, Height: pty.Window.Height,
		Windows: sizes, Now: c.srv.Now,
	})
	if err != nil {
		c.srv.Logger.Info("tui ended", "user", c.user.Name, "err", err)
		return 1
	}
	return 0
}
