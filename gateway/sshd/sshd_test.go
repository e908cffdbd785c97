package sshd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"charm.land/ssh"
	"charm.land/wish/v2"
	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
)

// fixture is a real SSH front over a real SQLite store.
type fixture struct {
	addr   string
	admin  gossh.Signer
	op     gossh.Signer
	logbuf *bytes.Buffer
}

func newSigner(t testing.TB) gossh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := gossh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authorized(s gossh.Signer) string { return string(gossh.MarshalAuthorizedKey(s.PublicKey())) }

func start(t testing.TB, attempts int) *fixture {
	t.Helper()
	return startWith(t, attempts, nil)
}

// startWith is start with a hook that may change the server before it
// serves (a different middleware chain).
func startWith(t testing.TB, attempts int, adjust func(*Server)) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var logbuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logbuf, nil))
	al := audit.New(st, logger, nil)
	svc := keys.NewService(st, al, nil)
	f := &fixture{admin: newSigner(t), op: newSigner(t), logbuf: &logbuf}
	if _, err := svc.Bootstrap(ctx, authorized(f.admin), ""); err != nil {
		t.Fatal(err)
	}
	actor := keys.Actor{User: "admin", Role: keys.RoleAdmin, Front: "test"}
	if _, _, err := svc.AddUser(ctx, actor, "bob", keys.RoleOperator, authorized(f.op)); err != nil {
		t.Fatal(err)
	}
	host := newSigner(t)
	var srv *Server
	srv, err = New(Options{
		HostKey: host, Identity: svc, Audit: al, Logger: logger,
		Throttle:         throttle.NewAuth(attempts, time.Minute, nil),
		ExtraCommands:    func(sess ssh.Session) []*cobra.Command { return testCommands(srv, sess) },
		HandshakeTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	f.addr = ln.Addr().String()
	return f
}

func (f *fixture) dial(auth ...gossh.AuthMethod) (*gossh.Client, error) {
	return gossh.Dial("tcp", f.addr, &gossh.ClientConfig{
		User: "x", Auth: auth, Timeout: 5 * time.Second,
		HostKeyCallback: gossh.InsecureIgnoreHostKey(), // the host is the fixture's
	})
}

func run(t testing.TB, c *gossh.Client, cmd string) (stdout, stderr string, err error) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var o, e bytes.Buffer
	sess.Stdout, sess.Stderr = &o, &e
	err = sess.Run(cmd)
	return o.String(), e.String(), err
}

func TestRequestsAndChannels(t *testing.T) {
	f := start(t, 20)
	c, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := []struct {
		req  string
		want bool
	}{
		{"auth-agent-req@openssh.com", false},
		{"x11-req", false},
		{"signal", false},
		{"keepalive@openssh.com", false},
		{"env", true},
	}
	for _, tc := range cases {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		var payload []byte
		if tc.req == "env" {
			payload = gossh.Marshal(struct{ K, V string }{"LANG", "C"})
		}
		ok, err := sess.SendRequest(tc.req, true, payload)
		sess.Close()
		if err != nil || ok != tc.want {
			t.Errorf("%s: accepted %v (err %v), want %v", tc.req, ok, err, tc.want)
		}
	}
	if _, err := c.Dial("tcp", f.addr); err == nil {
		t.Error("direct-tcpip channel accepted")
	}
	if _, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		t.Error("tcpip-forward accepted")
	}
	if _, _, err := c.OpenChannel("x11", nil); err == nil {
		t.Error("x11 channel accepted")
	}
}

// TestRegressionWindowChangeBeforeExec: window-change requests before exec
// used to fill the library's one-slot channel and block the request loop,
// so exec never ran (and raced with Session.Pty under -race).
func TestRegressionWindowChangeBeforeExec(t *testing.T) {
	f := start(t, 20)
	c, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sess.WindowChange(30+i, 100); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	sess.Stdout = &out
	done := make(chan error, 1)
	go func() { done <- sess.Run("whoami") }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "admin") {
			t.Fatalf("whoami with a PTY: %q %v", out.String(), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exec after window-change never ran")
	}
	// Window changes during the session do not block either.
	sess2, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess2.Close()
	if err := sess2.RequestPty("xterm", 24, 80, gossh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	var out2 bytes.Buffer
	sess2.Stdout = &out2
	if err := sess2.Start("test-windows 100x44"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := sess2.WindowChange(40+i, 100); err != nil {
			t.Fatal(err)
		}
	}
	if err := sess2.Wait(); err != nil {
		t.Fatalf("session with window changes: %v (%q)", err, out2.String())
	}
	if !strings.Contains(out2.String(), "window 100x44") {
		t.Fatalf("windows seen: %q", out2.String())
	}
}

func TestPanicKeepsServing(t *testing.T) {
	f := start(t, 20)
	c, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, stderr, err := run(t, c, "test-panic")
	var exit *gossh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 1 || stderr != "error: internal error\n" {
		t.Fatalf("panic session: err %v stderr %q", err, stderr)
	}
	if out, _, err := run(t, c, "whoami"); err != nil || !strings.HasPrefix(out, "admin") {
		t.Fatalf("after panic, same connection: %q %v", out, err)
	}
	c2, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		t.Fatalf("after panic, new connection: %v", err)
	}
	c2.Close()
}

// TestMiddlewaresFailClosed: a chain that lost userMiddleware must refuse,
// not run commands for nobody.
func TestMiddlewaresFailClosed(t *testing.T) {
	chains := map[string]func(*Server) []wish.Middleware{
		"command only": func(s *Server) []wish.Middleware {
			return []wish.Middleware{s.recoverMiddleware(s.commandMiddleware)}
		},
		"cap without user": func(s *Server) []wish.Middleware {
			return []wish.Middleware{s.recoverMiddleware(s.commandMiddleware, s.sessionCapMiddleware)}
		},
	}
	for name, chain := range chains {
		t.Run(name, func(t *testing.T) {
			f := startWith(t, 20, func(s *Server) {
				if err := s.srv.SetOption(wish.WithMiddleware(chain(s)...)); err != nil {
					t.Fatal(err)
				}
			})
			c, err := f.dial(gossh.PublicKeys(f.admin))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			out, stderr, err := run(t, c, "whoami")
			var exit *gossh.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != 1 || stderr != "error: permission denied\n" || out != "" {
				t.Fatalf("whoami without a resolved user: err %v stdout %q stderr %q", err, out, stderr)
			}
		})
	}
}

// TestSessionsShareConnection: sessions multiplexed on one connection share
// the library's context; each must still run as the key's user, and the cap
// counts each of them.
func TestSessionsShareConnection(t *testing.T) {
	f := start(t, 20)
	c, err := f.dial(gossh.PublicKeys(f.op))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			sess, err := c.NewSession()
			if err != nil {
				errs <- err
				return
			}
			defer sess.Close()
			out, err := sess.Output("whoami --json")
			if err == nil && !strings.Contains(string(out), `"user": "bob"`) {
				err = fmt.Errorf("whoami: %q", out)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestThrottleRefusesBeforeHandshake(t *testing.T) {
	f := start(t, 3)
	stranger := newSigner(t)
	for i := range 3 {
		if _, err := f.dial(gossh.PublicKeys(stranger)); err == nil {
			t.Fatalf("attempt %d: unknown key accepted", i+1)
		}
	}
	// Now even the admin's key is refused from this client, before any
	// SSH bytes are exchanged.
	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	if n != 0 || err == nil {
		t.Fatalf("throttled client got %d bytes (err %v); want the connection closed", n, err)
	}
}

// TestThrottleCountsConnections: several unknown keys before the right one
// in one connection cost one attempt, not one per key.
func TestThrottleCountsConnections(t *testing.T) {
	f := start(t, 3)
	strangers := gossh.PublicKeys(newSigner(t), newSigner(t), newSigner(t), f.admin)
	for i := range 3 { // per-key counting would refuse the second login
		c, err := f.dial(strangers)
		if err != nil {
			t.Fatalf("login %d with unknown keys first: %v", i+1, err)
		}
		c.Close()
	}
	if c, err := f.dial(gossh.PublicKeys(f.admin)); err == nil {
		c.Close()
		t.Fatal("a fourth connection after three connections with refused keys was let in")
	}
}

func TestHandshakeDeadline(t *testing.T) {
	f := start(t, 20)
	conn, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// Read the banner, never answer; the server must hang up (2 s deadline).
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept a silent pre-auth connection open for 10 s")
	}
}

// TestShutdownCutsHandshakes: a client stuck before authentication cannot
// hold Shutdown past its context.
func TestShutdownCutsHandshakes(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := New(Options{
		HostKey: newSigner(t), Identity: keys.NewService(st, audit.New(st, nil, nil), nil),
		Throttle:         throttle.NewAuth(20, time.Minute, nil),
		HandshakeTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Read(make([]byte, 8)); err != nil { // the banner: accepted
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown waited %v for a handshake", took)
	}
}

func TestJoinKeyArgs(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"ssh-ed25519", "AAAA", "me@host"}, "ssh-ed25519 AAAA me@host"},
		{[]string{"ssh-ed25519 AAAA a", "ecdsa-sha2-nistp256 BBBB b"}, "ssh-ed25519 AAAA a\necdsa-sha2-nistp256 BBBB b"},
		{[]string{"ssh-rsa", "CCCC", "ssh-ed25519", "DDDD", "two", "words"}, "ssh-rsa CCCC\nssh-ed25519 DDDD two words"},
		{[]string{"garbage", "more"}, "garbage more"},
		{[]string{"sk-ssh-ed25519@openssh.com", "EEEE"}, "sk-ssh-ed25519@openssh.com EEEE"},
	}
	for _, tc := range cases {
		if got := joinKeyArgs(tc.args); got != tc.want {
			t.Errorf("joinKeyArgs(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func FuzzJoinKeyArgs(f *testing.F) {
	f.Add("ssh-ed25519 AAAA c", "ssh-rsa BBBB")
	f.Add("", "\n\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		out := joinKeyArgs([]string{a, b})
		// Nothing is invented: the words out are the words in.
		if strings.Join(strings.Fields(out), " ") != strings.Join(strings.Fields(a+" "+b), " ") {
			t.Fatalf("joinKeyArgs changed the words: %q %q → %q", a, b, out)
		}
		if strings.Count(out, "\n") > len(strings.Fields(a+" "+b)) {
			t.Fatalf("more lines than words: %q", out)
		}
	})
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"2026-11-28":           time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		"2026-11-28T10:00:00Z": time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-1h", "2026-13-01"} {
		if _, err := parseSince(bad, now); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("parseSince(%q): err %v, want one naming the input", bad, err)
		}
	}
}

// BenchmarkConnectWhoami measures a full SSH connection: handshake, public-key
// auth, user lookup in SQLite, one command.
func BenchmarkConnectWhoami(b *testing.B) {
	f := start(b, 1<<30)
	for b.Loop() {
		c, err := f.dial(gossh.PublicKeys(f.admin))
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := run(b, c, "whoami"); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkSessionWhoami measures one command on an open connection.
func BenchmarkSessionWhoami(b *testing.B) {
	f := start(b, 1<<30)
	c, err := f.dial(gossh.PublicKeys(f.admin))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if _, _, err := run(b, c, "whoami"); err != nil {
			b.Fatal(err)
		}
	}
}

// testCommands are the test's own commands: test-panic panics in a
// session, test-windows prints window changes until the given size
// arrives.
func testCommands(srv *Server, sess ssh.Session) []*cobra.Command {
	return []*cobra.Command{{Use: "test-panic", Hidden: true, RunE: func(*cobra.Command, []string) error {
		panic("test hook: deliberate panic")
	}}, {Use: "test-windows COLSxROWS", Hidden: true, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for w := range srv.Windows(sess) {
				size := fmt.Sprintf("%dx%d", w.Width, w.Height)
				fmt.Fprintf(cmd.OutOrStdout(), "window %s\n", size)
				if size == args[0] {
					return nil
				}
			}
			return fmt.Errorf("session ended before window %s", args[0])
		}}}
}
