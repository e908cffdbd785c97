package sshd

import (
	"errors"
	"fmt"
	"runtime/debug"

	"charm.land/ssh"
	"charm.land/wish/v2"

	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/internal/termtext"
	"sbx.dev/sbx/keys"
)

// middlewares is the session chain, soft-serve style: everything runs inside
// the recover middleware, and wish composes first to last, so the last one
// listed runs first. A session is authenticated, then counted against its
// user's cap, then served.
func (s *Server) middlewares() []wish.Middleware {
	return []wish.Middleware{
		s.recoverMiddleware(
			s.commandMiddleware,
			s.sessionCapMiddleware,
			s.userMiddleware,
		),
	}
}

// recoverMiddleware runs mws (composed like wish.WithMiddleware) and turns a
// panic in any of them into a logged stack, a one-line error and exit 1: one
// broken command never takes the connection or the gateway with it. Unlike
// wish's recover middleware it tells the client and sets the exit status.
func (s *Server) recoverMiddleware(mws ...wish.Middleware) wish.Middleware {
	inner := func(ssh.Session) {}
	for _, mw := range mws {
		inner = mw(inner)
	}
	return func(next ssh.Handler) ssh.Handler {
		return func(sess ssh.Session) {
			func() {
				defer func() {
					if v := recover(); v != nil {
						s.Logger.Error("ssh session panic", "remote", sess.RemoteAddr().String(),
							"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
						fmt.Fprintln(sess.Stderr(), "error: internal error")
						_ = sess.Exit(1)
					}
				}()
				inner(sess)
			}()
			next(sess)
		}
	}
}

// userMiddleware resolves the user from the key the session really
// authenticated with and hands it on in the session's context. The
// public-key callback only said "some offered key is known"; deciding the
// user there is the CVE-2024-45337 hole (offer an admin's key, sign with
// another).
func (s *Server) userMiddleware(next ssh.Handler) ssh.Handler {
	return func(sess ssh.Session) {
		if user, ok := s.sessionUser(sess); ok {
			next(withUser(sess, user))
		}
	}
}

// sessionUser resolves the user from the key sess really authenticated
// with, or refuses the session. The middleware chain and the subsystems
// (which bypass it) both use it.
func (s *Server) sessionUser(sess ssh.Session) (keys.User, bool) {
	pk := sess.PublicKey()
	if pk == nil {
		refuse(sess, "permission denied")
		return keys.User{}, false
	}
	user, err := s.Identity.UserByPublicKey(sess.Context(), pk)
	if err != nil {
		s.Metrics.Auth("ssh", metrics.ResultFail)
		s.Logger.Info("ssh session refused", "remote", sess.RemoteAddr().String(), "err", err)
		msg := "permission denied"
		if errors.Is(err, keys.ErrDisabled) {
			msg = keys.ErrDisabled.Error()
		}
		refuse(sess, msg)
		return keys.User{}, false
	}
	s.Metrics.Auth("ssh", metrics.ResultOK)
	return user, true
}

// sessionCapMiddleware counts the session against its user's cap and the
// live-sessions gauge for as long as it runs.
func (s *Server) sessionCapMiddleware(next ssh.Handler) ssh.Handler {
	return func(sess ssh.Session) {
		user, ok := userOf(sess)
		if !ok {
			refuse(sess, "permission denied") // chain misordered: fail closed
			return
		}
		release, ok := s.holdSession(sess, user.Name)
		if !ok {
			return
		}
		defer release()
		next(sess)
	}
}

// holdSession counts a session against the user's cap (refusing it past
// the cap) and in the metrics; release ends both. Shell and command
// sessions pass it in the middleware chain, subsystems call it themselves.
func (s *Server) holdSession(sess ssh.Session, user string) (release func(), ok bool) {
	rel, ok := s.acquire(user)
	if !ok {
		refuse(sess, fmt.Sprintf("too many sessions for %s (limit %d)", user, s.MaxSessionsPerUser))
		return nil, false
	}
	s.Metrics.SessionStarted()
	return func() { s.Metrics.SessionEnded(); rel() }, true
}

// commandMiddleware serves the session: a command runs through a fresh cobra
// root, `scp -f|-t` is legacy scp, and no command is the fleet TUI.
func (s *Server) commandMiddleware(next ssh.Handler) ssh.Handler {
	return func(sess ssh.Session) {
		user, ok := userOf(sess)
		if !ok {
			refuse(sess, "permission denied") // chain misordered: fail closed
			return
		}
		s.Logger.Info("ssh session", "user", user.Name, "remote", sess.RemoteAddr().String(), "command", loggedCommand(sess.Command()))
		c := &call{
			srv:   s,
			sess:  sess,
			user:  user,
			actor: keys.Actor{User: user.Name, Role: user.Role, Front: "ssh", Addr: clientOf(sess.RemoteAddr())},
		}
		// A running command is activity, however quiet (logs -f, new while
		// the box boots, attach): keepalives hold the idle timeout off, and
		// a dead client still misses them and is cut.
		stop := s.keepAlive(sess.Context(), sess)
		defer stop()
		switch args := sess.Command(); {
		case len(args) == 0:
			_ = sess.Exit(c.tui())
		case args[0] == "scp":
			_ = sess.Exit(c.scp(args))
		default:
			_ = sess.Exit(c.run(sess.Context(), args))
		}
		next(sess)
	}
}

// refuse ends a session with a one-line error and exit 1.
func refuse(sess ssh.Session, msg string) {
	fmt.Fprintln(sess.Stderr(), "error: "+termtext.String(msg))
	_ = sess.Exit(1)
}

// userKey is the context key of the session's resolved keys.User.
type userKey struct{}

// userSession is a session carrying its resolved user. The library's
// context is shared by every session of a connection, so the user lives in
// a per-session layer over it rather than in the shared map.
type userSession struct {
	ssh.Session
	ctx userContext
}

func (s userSession) Context() ssh.Context { return s.ctx }

type userContext struct {
	ssh.Context
	user keys.User
}

func (c userContext) Value(key any) any {
	if key == (userKey{}) {
		return c.user
	}
	return c.Context.Value(key)
}

func withUser(sess ssh.Session, user keys.User) ssh.Session {
	return userSession{Session: sess, ctx: userContext{Context: sess.Context(), user: user}}
}

// userOf is the user userMiddleware resolved for sess.
func userOf(sess ssh.Session) (keys.User, bool) {
	user, ok := sess.Context().Value(userKey{}).(keys.User)
	return user, ok
}
