package sshd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strconv"

	"github.com/charmbracelet/ssh"
	"github.com/spf13/cobra"

	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/keys"
)

// handle runs one session: recover, resolve the user from the key that
// really authenticated, enforce the per-user session cap, then run the
// command (or the PTY banner).
func (s *Server) handle(sess ssh.Session) {
	remote := sess.RemoteAddr().String()
	defer func() {
		if v := recover(); v != nil {
			s.Logger.Error("ssh session panic", "remote", remote, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			fmt.Fprintln(sess.Stderr(), "error: internal error")
			_ = sess.Exit(1)
		}
	}()

	pk := sess.PublicKey()
	if pk == nil {
		fmt.Fprintln(sess.Stderr(), "error: permission denied")
		_ = sess.Exit(1)
		return
	}
	user, err := s.Identity.UserByPublicKey(sess.Context(), pk)
	if err != nil {
		s.Metrics.Auth("ssh", metrics.ResultFail)
		s.Logger.Info("ssh session refused", "remote", remote, "err", err)
		msg := "permission denied"
		if errors.Is(err, keys.ErrDisabled) {
			msg = keys.ErrDisabled.Error()
		}
		fmt.Fprintln(sess.Stderr(), "error: "+msg)
		_ = sess.Exit(1)
		return
	}
	s.Metrics.Auth("ssh", metrics.ResultOK)

	release, ok := s.acquire(user.Name)
	if !ok {
		fmt.Fprintf(sess.Stderr(), "error: too many sessions for %s (limit %d)\n", user.Name, s.MaxSessionsPerUser)
		_ = sess.Exit(1)
		return
	}
	defer release()
	s.Metrics.SessionStarted()
	defer s.Metrics.SessionEnded()

	log := s.Logger.With("user", user.Name, "remote", remote)
	log.Info("ssh session", "command", sess.Command())
	c := &call{
		srv:   s,
		sess:  sess,
		user:  user,
		actor: keys.Actor{User: user.Name, Role: user.Role, Front: "ssh", Addr: clientOf(sess.RemoteAddr())},
	}
	if len(sess.Command()) == 0 {
		// The fleet TUI replaces this banner.
		fmt.Fprintf(sess, "sbx: signed in as %s (%s). The fleet TUI comes with the ssh issue; try `%s help`.\r\n",
			user.Name, user.Role, c.usagePrefix())
		_ = sess.Exit(0)
		return
	}
	_ = sess.Exit(c.run(sess.Context(), sess.Command()))
}

// acquire counts a session against the user's cap.
func (s *Server) acquire(user string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[user] >= s.MaxSessionsPerUser {
		return nil, false
	}
	s.sessions[user]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.sessions[user]--; s.sessions[user] <= 0 {
			delete(s.sessions, user)
		}
	}, true
}

// call is one command invocation: who, over which session.
type call struct {
	srv   *Server
	sess  ssh.Session
	user  keys.User
	actor keys.Actor
}

// usagePrefix is how a user reaches this server: "ssh -p PORT HOST".
func (c *call) usagePrefix() string {
	host, port := "localhost", "22"
	if tcp, ok := c.sess.LocalAddr().(*net.TCPAddr); ok {
		port = strconv.Itoa(tcp.Port)
		if !tcp.IP.IsLoopback() && !tcp.IP.IsUnspecified() {
			host = tcp.IP.String()
		}
	}
	if port == "22" {
		return "ssh " + host
	}
	return "ssh -p " + port + " " + host
}

// run executes args through a fresh cobra root and returns the exit code.
func (c *call) run(ctx context.Context, args []string) int {
	root := c.root()
	root.SetArgs(args)
	root.SetIn(c.sess)
	root.SetOut(c.sess)
	root.SetErr(c.sess.Stderr())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(c.sess.Stderr(), "error: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// accessAdmin marks commands only admins may run.
const accessAdmin = "admin"

func needsAdmin(cmd *cobra.Command) bool {
	for ; cmd != nil; cmd = cmd.Parent() {
		if cmd.Annotations["access"] == accessAdmin {
			return true
		}
	}
	return false
}
