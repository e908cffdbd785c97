// Package sshd is the gateway's SSH front (charm.land/wish/v2 over
// charm.land/ssh, Charm's fork of gliderlabs/ssh): public-key auth only, the user resolved after
// authentication from the key the session really used, handshake and idle
// deadlines, a recover around every connection and session, only session
// channels with a short list of requests, the shared auth throttle before
// the handshake, and the commands run through a fresh cobra root per session.
// Sessions run through a wish middleware chain (middleware.go).
//
// Over the core (fleet): the box commands (cmd_box.go, cmd_account.go),
// attach and exec through the raw channel with window changes and signals
// (cmd_attach.go), the sftp subsystem and legacy scp with paths BOX/PATH
// (sftp.go, scp.go), and the fleet TUI for a PTY session without a command
// (tui/). Everything reaches boxes only through the caller's fleet calls.
package sshd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"charm.land/ssh"
	"charm.land/wish/v2"
	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/internal/sshalgo"
	"sbx.dev/sbx/keys"
)

// Identity is what the SSH front needs from keys.Service.
type Identity interface {
	UserByPublicKey(ctx context.Context, pk gossh.PublicKey) (keys.User, error)
	AddUser(ctx context.Context, actor keys.Actor, name string, role keys.Role, authorizedKeys string) (keys.User, []keys.Key, error)
	RemoveUser(ctx context.Context, actor keys.Actor, name string) error
	SetDisabled(ctx context.Context, actor keys.Actor, name string, disabled bool) error
	Users(ctx context.Context) ([]keys.User, error)
	AddKeys(ctx context.Context, actor keys.Actor, user, authorizedKeys string) ([]keys.Key, error)
	RemoveKey(ctx context.Context, actor keys.Actor, user, fingerprint string) error
	Keys(ctx context.Context, actor keys.Actor, user string) ([]keys.Key, error)
	CreateAPIKey(ctx context.Context, actor keys.Actor, user, name string, scopes []string, ttl time.Duration) (string, keys.APIKey, error)
	APIKeys(ctx context.Context, actor keys.Actor, user string) ([]keys.APIKey, error)
	RevokeAPIKey(ctx context.Context, actor keys.Actor, user, id string) error
	CreateLoginLink(ctx context.Context, actor keys.Actor, user string) (string, time.Time, error)
}

// AuditLog lists audit rows for `audit`.
type AuditLog interface {
	List(ctx context.Context, f audit.Filter) ([]audit.Entry, error)
}

// Options configures a Server.
type Options struct {
	HostKey  gossh.Signer
	Identity Identity
	Audit    AuditLog
	// Fleet is the core: boxes, runs, files. Nil disables the box commands,
	// attach/exec, sftp/scp and the TUI (they say so).
	Fleet *fleet.Fleet
	// NoFleet says why boxes are unavailable when Fleet is nil (the core's
	// reason, e.g. no KVM and no QEMU); empty gives a generic line.
	NoFleet string
	// WebURL is the console's base URL for `login` links (called when a
	// link is made: the listen address may be known only after start).
	WebURL   func() string
	Throttle *throttle.Auth
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	Now      func() time.Time

	HandshakeTimeout   time.Duration
	IdleTimeout        time.Duration
	MaxSessionsPerUser int
	// KeyExchanges, Ciphers and MACs are the transport algorithms offered
	// (ssh.kex, ssh.ciphers, ssh.macs); an empty list is sshalgo's modern
	// default, never x/crypto's own, which offers SHA-1 and NIST curves.
	KeyExchanges []string
	Ciphers      []string
	MACs         []string
	// ExtraCommands are commands of the operator's own, added to every
	// session's command tree after the built-in ones; sess is nil when the
	// tree is only listed (Commands).
	ExtraCommands func(sess ssh.Session) []*cobra.Command
}

// Server is the SSH front.
type Server struct {
	Options
	srv *ssh.Server

	mu          sync.Mutex
	sessions    map[string]int      // live sessions per user
	channels    map[string]*resizes // window changes per session channel
	nextChannel uint64
	live        map[net.Conn]struct{} // every accepted connection
	ln          net.Listener
	closing     bool
	conns       sync.WaitGroup

	forwards forwards // live direct-tcpip channels per connection (forward.go)
}

// maxAuthTries bounds the keys one connection may try.
const maxAuthTries = 6

// allowedSessionRequests are the only channel requests a session may make:
// no agent forwarding, no X11; signals only while attach or exec runs a
// process that takes them (filteredChannel).
var allowedSessionRequests = map[string]bool{
	"pty-req": true, "exec": true, "shell": true, "window-change": true, "subsystem": true, "env": true,
	"signal": true,
}

// New builds the server; Serve starts it.
func New(o Options) (*Server, error) {
	if o.HostKey == nil || o.Identity == nil || o.Throttle == nil {
		return nil, errors.New("sshd: host key, identity and throttle are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 15 * time.Minute
	}
	if o.MaxSessionsPerUser <= 0 {
		o.MaxSessionsPerUser = 16
	}
	for _, l := range []struct {
		kind  sshalgo.Kind
		names *[]string
	}{{sshalgo.KeyExchange, &o.KeyExchanges}, {sshalgo.Cipher, &o.Ciphers}, {sshalgo.MAC, &o.MACs}} {
		if len(*l.names) == 0 {
			*l.names = sshalgo.Default(l.kind)
		}
		if err := sshalgo.Check(l.kind, *l.names); err != nil {
			return nil, fmt.Errorf("sshd: %s algorithms: %w", l.kind, err)
		}
	}
	s := &Server{Options: o, sessions: map[string]int{}, channels: map[string]*resizes{}, live: map[net.Conn]struct{}{}}
	srv, err := wish.NewServer(
		wish.WithVersion("sbx"),
		withHostKey(o.HostKey),
		wish.WithPublicKeyAuth(s.knownKey),
		ssh.WrapConn(s.admit),
		s.onlySessions(),
		ssh.Option(func(srv *ssh.Server) error {
			srv.ServerConfigCallback = s.serverConfig
			return nil
		}),
		ssh.Option(func(srv *ssh.Server) error {
			srv.ConnectionFailedCallback = s.connectionFailed
			return nil
		}),
		wish.WithMiddleware(s.middlewares()...),
	)
	if err != nil {
		return nil, fmt.Errorf("sshd: build server: %w", err)
	}
	s.srv = srv
	return s, nil
}

// withHostKey serves signer as the host key. wish has options only for key
// files and PEM; the gateway loads and keeps its key itself.
func withHostKey(signer gossh.Signer) ssh.Option {
	return func(srv *ssh.Server) error {
		srv.AddHostKey(signer)
		return nil
	}
}

// onlySessions allows session channels and direct-tcpip to a box's port
// (forward.go, our own handler: never the stock one, which dials the
// gateway's network) and nothing else: no forwarded-tcpip, x11 or
// auth-agent channels, no global requests (tcpip-forward) and one
// subsystem, sftp. Session requests go through the allow-list in
// filteredChannel.
func (s *Server) onlySessions() ssh.Option {
	return func(srv *ssh.Server) error {
		srv.ChannelHandlers = map[string]ssh.ChannelHandler{"session": s.session, "direct-tcpip": s.directTCPIP}
		srv.RequestHandlers = map[string]ssh.RequestHandler{}
		srv.SubsystemHandlers = map[string]ssh.SubsystemHandler{"sftp": s.sftpSubsystem}
		return nil
	}
}

// serverConfig is each connection's x/crypto config: the transport
// algorithms of the options (only these are offered; the gateway's host key
// is ed25519, keys.LoadOrCreateHostKey, so its one signature algorithm is
// the only host key algorithm) and the bound on the keys one connection may
// try. charm.land/ssh adds the host key, version and
// handlers.
func (s *Server) serverConfig(ssh.Context) *gossh.ServerConfig {
	return &gossh.ServerConfig{
		Config: gossh.Config{
			KeyExchanges: slices.Clone(s.KeyExchanges),
			Ciphers:      slices.Clone(s.Ciphers),
			MACs:         slices.Clone(s.MACs),
		},
		MaxAuthTries: maxAuthTries,
	}
}

func (s *Server) connectionFailed(conn net.Conn, err error) {
	s.Logger.Debug("ssh connection failed", "remote", conn.RemoteAddr().String(), "err", err)
}

// Serve accepts connections on ln until Shutdown. It runs its own accept
// loop so every connection gets a recover that logs through the gateway's
// logger: charm.land/ssh's own (since v0.4) logs to slog's default, and
// a panic that escaped would take the whole gateway down.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ssh.ErrServerClosed
	}
	s.ln = ln
	s.mu.Unlock()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return ssh.ErrServerClosed
			}
			// Out of file descriptors and the like: wait, do not die.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.Logger.Error("ssh accept", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !s.track(conn, true) {
			conn.Close()
			continue
		}
		go func() {
			defer s.track(conn, false)
			defer s.recover("connection", conn.RemoteAddr().String())
			s.srv.HandleConn(conn)
		}()
	}
}

// track records live connections, handshakes included (the library only
// tracks authenticated ones), so Shutdown can cut them all.
func (s *Server) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.closing {
			return false
		}
		s.live[c] = struct{}{}
		s.conns.Add(1)
		return true
	}
	delete(s.live, c)
	s.conns.Done()
	return true
}

// Shutdown stops accepting, waits for connections to end until ctx is done,
// then closes the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.live {
			_ = c.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

func (s *Server) recover(what, remote string) {
	if v := recover(); v != nil {
		s.Logger.Error("ssh "+what+" panic", "remote", remote, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}
}

// clientOf is the throttle key of an SSH peer: its IP (no proxies on SSH).
func clientOf(addr net.Addr) string {
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}

// admit runs before the SSH handshake: a client over the failure limit is
// dropped without a word, and the rest get deadlines.
func (s *Server) admit(ctx ssh.Context, conn net.Conn) net.Conn {
	client := clientOf(conn.RemoteAddr())
	if wait, ok := s.Throttle.Check(client); !ok {
		s.Metrics.Auth("ssh", metrics.ResultThrottled)
		s.Logger.Warn("ssh connection throttled", "client", client, "retry_after", wait)
		return nil
	}
	return newDeadlineConn(ctx, conn, s.HandshakeTimeout, s.IdleTimeout)
}

// knownKey only answers "is this key registered to an enabled user". It must
// not decide who the user is: a client may offer a key here and authenticate
// with another (CVE-2024-45337); the session resolves the user from the key
// that really signed.
//
// A connection counts as one failed attempt against the throttle at its
// first refused key: a client whose agent offers a few unknown keys before
// the right one should not burn several attempts per login, and MaxAuthTries
// bounds the keys tried per connection.
func (s *Server) knownKey(ctx ssh.Context, key ssh.PublicKey) bool {
	_, err := s.Identity.UserByPublicKey(ctx, key)
	if err == nil {
		return true
	}
	client := clientOf(ctx.RemoteAddr())
	if ctx.Value(refusedKey{}) == nil {
		ctx.SetValue(refusedKey{}, true)
		s.Throttle.Fail(client)
	}
	s.Metrics.Auth("ssh", metrics.ResultFail)
	s.Logger.Info("ssh key refused", "client", client, "fingerprint", gossh.FingerprintSHA256(key), "err", err)
	return false
}

// refusedKey marks a connection that already counted as a failed attempt.
type refusedKey struct{}

// session accepts a session channel with its requests filtered through the
// allow-list, then hands it to the library's session handler.
func (s *Server) session(srv *ssh.Server, conn *gossh.ServerConn, ch gossh.NewChannel, ctx ssh.Context) {
	defer s.recover("session channel", conn.RemoteAddr().String())
	ssh.DefaultSessionHandler(srv, conn, filteredChannel{NewChannel: ch, srv: s}, ctx)
}

type filteredChannel struct {
	gossh.NewChannel
	srv *Server
}

func (f filteredChannel) Accept() (gossh.Channel, <-chan *gossh.Request, error) {
	ch, reqs, err := f.NewChannel.Accept()
	if err != nil {
		return nil, nil, err
	}
	id, windows := f.srv.register(ch)
	out := make(chan *gossh.Request)
	go func() {
		defer close(out)
		defer f.srv.unregister(id)
		// Tag the session so its handler finds its window changes (Windows).
		out <- &gossh.Request{Type: "env", Payload: gossh.Marshal(struct{ Name, Value string }{sessionEnv, id})}
		for req := range reqs {
			if !allowedSessionRequests[req.Type] {
				f.srv.Logger.Info("ssh request refused", "type", req.Type)
				if req.WantReply {
					_ = req.Reply(false, nil)
				}
				continue
			}
			switch req.Type {
			case "window-change":
				w, ok := parseWindow(req.Payload)
				if ok {
					windows.set(w)
				}
				if req.WantReply {
					_ = req.Reply(ok, nil)
				}
				continue
			case "signal":
				// Handled here: the library queues signals nobody reads
				// and never replies.
				var sig struct{ Signal string }
				ok := gossh.Unmarshal(req.Payload, &sig) == nil && windows.wantSignals.Load()
				if ok {
					select {
					case windows.signals <- sig.Signal:
					default: // a burst the process has not taken yet: drop
						ok = false
					}
				}
				if req.WantReply {
					_ = req.Reply(ok, nil)
				}
				continue
			case "env":
				var kv struct{ Name, Value string }
				if gossh.Unmarshal(req.Payload, &kv) == nil && kv.Name == sessionEnv {
					if req.WantReply {
						_ = req.Reply(false, nil)
					}
					continue
				}
			}
			out <- req
		}
	}()
	return ch, out, nil
}

// deadlineConn enforces the handshake deadline until the connection has
// authenticated, then the idle timeout. It is the one owner of the
// connection's deadlines: charm.land/ssh's own timeouts are left unset.
type deadlineConn struct {
	net.Conn
	ctx       ssh.Context
	handshake time.Time
	idle      time.Duration
}

func newDeadlineConn(ctx ssh.Context, c net.Conn, handshake, idle time.Duration) *deadlineConn {
	d := &deadlineConn{Conn: c, ctx: ctx, handshake: time.Now().Add(handshake), idle: idle}
	_ = c.SetDeadline(d.handshake)
	return d
}

func (c *deadlineConn) refresh() {
	deadline := time.Now().Add(c.idle)
	// ContextKeyConn is set once NewServerConn returned: authenticated.
	if c.ctx.Value(ssh.ContextKeyConn) == nil && c.handshake.Before(deadline) {
		deadline = c.handshake
	}
	_ = c.Conn.SetDeadline(deadline)
}

func (c *deadlineConn) Read(p []byte) (int, error) {
	c.refresh()
	return c.Conn.Read(p)
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	c.refresh()
	return c.Conn.Write(p)
}

// SetDeadline ignores the library's resets (it clears deadlines when its own
// timeouts are off); this type owns the deadlines.
func (c *deadlineConn) SetDeadline(time.Time) error { return nil }
