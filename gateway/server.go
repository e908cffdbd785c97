// Package gateway is the sbx process: one Server holding the store, the
// identity core and every front (SSH, HTTP), started and drained together.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"charm.land/ssh"
	"github.com/alexedwards/scs/v2"
	"github.com/spf13/cobra"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/fleet/accounts"
	"sbx.dev/sbx/gateway/boxnet"
	"sbx.dev/sbx/gateway/config"
	"sbx.dev/sbx/gateway/mcp"
	"sbx.dev/sbx/gateway/metrics"
	"sbx.dev/sbx/gateway/sshd"
	"sbx.dev/sbx/gateway/throttle"
	"sbx.dev/sbx/gateway/web"
	"sbx.dev/sbx/internal/buildinfo"
	"sbx.dev/sbx/internal/netpolicy"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/store"
	"sbx.dev/sbx/store/postgres"
)

// AddrFile, in the data dir beside the database (store.FileName), lists
// the addresses the running gateway listens on, one "name=value" per line
// (ssh, http, pid), so scripts find random ports.
const AddrFile = "sbx.addr"

// DrainTimeout is how long sessions and requests may finish after SIGTERM;
// then they are cut. It leaves a second of the 5 s stop budget for closing
// connections and the store.
const DrainTimeout = 4 * time.Second

// Options are the process-level choices that are not configuration.
type Options struct {
	Logger *slog.Logger
	// Now is the clock for throttles, rate limits and key expiry.
	Now func() time.Time
	// HomeDir is searched for ~/.ssh/*.pub when no admin keys are given.
	HomeDir string
	// SSHCommands are extra commands for the SSH front
	// (sshd.Options.ExtraCommands): tests bring theirs here; the shipped
	// binary sets none.
	SSHCommands func(sess ssh.Session) []*cobra.Command
	// HTTPRoutes are extra handlers for the HTTP front
	// (web.Options.ExtraRoutes): tests bring theirs here; the shipped
	// binary sets none.
	HTTPRoutes map[string]http.Handler
	// GuestBinary is the static guest binary boxes boot (init, agent,
	// hooks) and QEMU runs per guest connection; "" means sbx-guest next
	// to this executable, else this executable.
	GuestBinary string
	// Egress adjusts the boxes' way out beyond the configuration (no flag,
	// no key): tests bring their trust and resolver here; the shipped
	// binary sets none.
	Egress Egress
}

// Egress is how boxes reach destinations, past the allow-lists.
type Egress struct {
	// Trust are forbidden destinations boxes may reach nonetheless
	// (boxnet.Config.EgressTrust).
	Trust []netpolicy.Trust
	// Resolver replaces DNS for egress destinations.
	Resolver boxnet.Resolver
}

// Server is one gateway process.
type Server struct {
	cfg  config.Config
	opts Options
	log  *slog.Logger

	store    dataStore
	sessions scs.Store
	// shared is the PostgreSQL store when store.dsn names one (several
	// gateways share it): leases and notifications; nil on SQLite.
	shared    *postgres.Store
	keys      *keys.Service
	audit     *audit.Log
	hostKey   gossh.Signer
	bootstrap keys.BootstrapResult

	core core
	// bg lives until Shutdown: the boxes' network paths.
	bg       context.Context
	bgCancel context.CancelFunc

	ssh  *sshd.Server
	http *http.Server
	tls  bool

	sshLn, httpLn net.Listener
	errc          chan error
	once          sync.Once

	// preview serves web previews of box ports (preview.go); nil: off.
	preview   *http.Server
	previewLn net.Listener
}

// NewServer opens the store, creates the first admin if there is none,
// loads the host key and builds both fronts. Start listens.
func NewServer(ctx context.Context, cfg config.Config, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", cfg.DataDir, err)
	}
	s := &Server{cfg: cfg, opts: opts, log: opts.Logger, errc: make(chan error, 2)}
	st, err := s.openStore(ctx)
	if err != nil {
		return nil, err
	}
	s.store = st
	s.bg, s.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	ok := false
	defer func() {
		if !ok {
			_ = st.Close()
		}
	}()

	s.audit = audit.New(st, opts.Logger, opts.Now)
	s.keys = keys.NewService(st, s.audit, opts.Now)
	s.bootstrap, err = s.keys.Bootstrap(ctx, cfg.AdminKeys, opts.HomeDir)
	if err != nil {
		return nil, fmt.Errorf("register the first admin: %w", err)
	}
	s.hostKey, err = keys.LoadOrCreateHostKey(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}

	trusted, err := cfg.TrustedProxyPrefixes()
	if err != nil {
		return nil, err
	}
	if err := s.startCore(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if !ok {
			_ = s.stopCore()
			s.bgCancel()
		}
	}()
	authThrottle := throttle.NewAuth(cfg.Auth.ThrottleAttempts, cfg.Auth.ThrottleWindow.D(), opts.Now)
	m := metrics.New()

	s.ssh, err = sshd.New(sshd.Options{
		HostKey:            s.hostKey,
		Identity:           s.keys,
		Audit:              s.audit,
		Fleet:              s.core.fleet,
		NoFleet:            s.core.why,
		WebURL:             s.webURL,
		Throttle:           authThrottle,
		Metrics:            m,
		Logger:             opts.Logger.With("front", "ssh"),
		Now:                opts.Now,
		HandshakeTimeout:   cfg.SSH.HandshakeTimeout.D(),
		IdleTimeout:        cfg.SSH.IdleTimeout.D(),
		MaxSessionsPerUser: cfg.SSH.MaxSessionsPerUser,
		KeyExchanges:       cfg.SSH.KeyExchanges,
		Ciphers:            cfg.SSH.Ciphers,
		MACs:               cfg.SSH.MACs,
		ExtraCommands:      opts.SSHCommands,
	})
	if err != nil {
		return nil, err
	}

	var rate *throttle.Rate
	if cfg.HTTP.RatePerMinute > 0 {
		rate = throttle.NewRate(cfg.HTTP.RatePerMinute, opts.Now)
	}
	mcpHandler := mcp.New(mcp.Options{
		Fleet:          s.core.fleet,
		Identity:       s.keys,
		Throttle:       authThrottle,
		Rate:           rate,
		Audit:          s.audit,
		Metrics:        m,
		Logger:         opts.Logger.With("front", "mcp"),
		Now:            opts.Now,
		TrustedProxies: trusted,
		WaitMax:        cfg.MCP.WaitMax.D(),
		Version:        buildinfo.Get().Short(),
	})
	handler := web.New(web.Options{
		Fleet:           s.core.fleet,
		Audit:           s.audit,
		MCP:             mcpHandler,
		Sessions:        s.sessions,
		SecureCookies:   cfg.HTTP.TLSCert != "" || cfg.Web.SecureCookies,
		SessionIdle:     cfg.Web.SessionIdle.D(),
		SessionLifetime: cfg.Web.SessionLifetime.D(),
		LoginHint:       "ssh -p " + portOf(cfg.SSH.Listen) + " " + hostOf(cfg.SSH.Listen) + " login",
		Now:             opts.Now,
		Identity:        s.keys,
		Throttle:        authThrottle,
		Rate:            rate,
		Metrics:         m,
		Logger:          opts.Logger.With("front", "http"),
		TrustedProxies:  trusted,
		BodyLimit:       cfg.HTTP.BodyLimit,
		MetricsAuth:     cfg.HTTP.MetricsAuth,
		ExtraRoutes:     opts.HTTPRoutes,
		PreviewURL:      s.PreviewURL,
	})
	s.http = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	// Open SSE streams end at shutdown instead of holding the drain.
	s.http.RegisterOnShutdown(handler.CloseStreams)
	if cfg.HTTP.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.HTTP.TLSCert, cfg.HTTP.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("http.tls_cert %s / http.tls_key %s: %w", cfg.HTTP.TLSCert, cfg.HTTP.TLSKey, err)
		}
		s.http.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.tls = true
	}
	s.newPreview(trusted)
	ok = true
	return s, nil
}

// dataStore is everything the gateway keeps in its database: one
// store.Store over either dialect (store.SQLite and postgres.Store embed it,
// and add what their database alone has).
type dataStore interface {
	keys.Store
	keys.WebStore
	audit.Store
	accounts.Store
	fleet.Store
	fleet.MCPStore
	fleet.NotifyStore
	fleet.PresetStore
	fleet.MirrorStore
	fleet.ProfileStore
	Close() error
}

var (
	_ dataStore = (*store.SQLite)(nil)
	_ dataStore = (*postgres.Store)(nil)
)

// openStore opens the database store.dsn names: SQLite in the data dir
// when it is empty, else PostgreSQL (shared with other gateways).
func (s *Server) openStore(ctx context.Context) (dataStore, error) {
	if s.cfg.Store.DSN == "" {
		st, err := store.Open(ctx, filepath.Join(s.cfg.DataDir, store.FileName))
		if err != nil {
			return nil, fmt.Errorf("open store in %s: %w", s.cfg.DataDir, err)
		}
		s.sessions = st.SessionStore(s.opts.Now)
		return st, nil
	}
	st, err := postgres.Open(ctx, s.cfg.Store.DSN)
	if err != nil {
		// pgx errors can quote the DSN: say which one, masked, and
		// redact the error's text the same way.
		dsn := config.MaskDSN(s.cfg.Store.DSN)
		msg := strings.ReplaceAll(err.Error(), s.cfg.Store.DSN, dsn)
		return nil, fmt.Errorf("store.dsn %s: %s", dsn, msg)
	}
	s.sessions = st.SessionStore(s.opts.Now)
	s.shared = st
	return st, nil
}

// Start listens on both addresses and serves in the background; Wait
// reports a front that stopped on its own.
func (s *Server) Start(ctx context.Context) error {
	var lc net.ListenConfig
	var err error
	if s.sshLn, err = lc.Listen(ctx, "tcp", s.cfg.SSH.Listen); err != nil {
		return fmt.Errorf("ssh.listen %s: %w", s.cfg.SSH.Listen, err)
	}
	if s.httpLn, err = lc.Listen(ctx, "tcp", s.cfg.HTTP.Listen); err != nil {
		_ = s.sshLn.Close()
		return fmt.Errorf("http.listen %s: %w", s.cfg.HTTP.Listen, err)
	}
	go func() {
		if err := s.ssh.Serve(s.sshLn); err != nil && !errors.Is(err, ssh.ErrServerClosed) {
			s.errc <- fmt.Errorf("ssh: %w", err)
		}
	}()
	go func() {
		var err error
		if s.tls {
			err = s.http.ServeTLS(s.httpLn, "", "")
		} else {
			err = s.http.Serve(s.httpLn)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errc <- fmt.Errorf("http: %w", err)
		}
	}()
	if err := s.startPreview(ctx); err != nil {
		return err
	}
	if err := s.writeAddrFile(); err != nil {
		return err
	}
	return nil
}

// Wait returns when a front fails on its own.
func (s *Server) Wait() <-chan error { return s.errc }

// Shutdown drains both fronts until ctx is done, then closes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	s.once.Do(func() {
		_ = os.Remove(filepath.Join(s.cfg.DataDir, AddrFile))
		var wg sync.WaitGroup
		var mu sync.Mutex
		add := func(err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}
		wg.Go(func() {
			if err := s.ssh.Shutdown(ctx); err != nil {
				add(fmt.Errorf("ssh shutdown: %w", err))
			}
		})
		wg.Go(func() {
			if err := s.http.Shutdown(ctx); err != nil {
				_ = s.http.Close()
				add(fmt.Errorf("http shutdown: %w", err))
			}
		})
		if s.preview != nil {
			wg.Go(func() {
				if err := s.preview.Shutdown(ctx); err != nil {
					_ = s.preview.Close()
					add(fmt.Errorf("preview shutdown: %w", err))
				}
			})
		}
		wg.Wait()
		if err := s.stopCore(); err != nil {
			add(fmt.Errorf("stop core: %w", err))
		}
		s.bgCancel()
		if err := s.store.Close(); err != nil {
			add(fmt.Errorf("close store: %w", err))
		}
	})
	return errors.Join(errs...)
}

// SSHAddr and HTTPAddr are the real listening addresses (port 0 resolved).
func (s *Server) SSHAddr() net.Addr { return s.sshLn.Addr() }

// HTTPAddr is the HTTP front's listening address.
func (s *Server) HTTPAddr() net.Addr { return s.httpLn.Addr() }

// HTTPURL is the base URL of the HTTP front.
func (s *Server) HTTPURL() string {
	scheme := "http"
	if s.tls {
		scheme = "https"
	}
	return scheme + "://" + s.HTTPAddr().String()
}

// HostKeyFingerprint is the SSH host key's SHA256 fingerprint.
func (s *Server) HostKeyFingerprint() string { return gossh.FingerprintSHA256(s.hostKey.PublicKey()) }

// Bootstrap says how the first admin was registered.
func (s *Server) Bootstrap() keys.BootstrapResult { return s.bootstrap }

// SSHCommand is how a user reaches the SSH front.
func (s *Server) SSHCommand() string {
	host, port, _ := net.SplitHostPort(s.SSHAddr().String())
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
		host = "localhost"
	}
	if port == "22" {
		return "ssh " + host
	}
	return "ssh -p " + port + " " + host
}

// writeAddrFile publishes the real addresses atomically.
func (s *Server) writeAddrFile() error {
	var b strings.Builder
	fmt.Fprintf(&b, "ssh=%s\nhttp=%s\nurl=%s\npid=%d\n", s.SSHAddr(), s.HTTPAddr(), s.HTTPURL(), os.Getpid())
	return writeFileAtomic(filepath.Join(s.cfg.DataDir, AddrFile), []byte(b.String()), 0o600)
}

// writeFileAtomic writes via a temp file, fsync and rename, so a reader never
// sees half a file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// hostOf and portOf split a listen address for the hints the fronts print.
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil || h == "" || h == "0.0.0.0" || h == "::" {
		return "localhost"
	}
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "22"
	}
	return p
}

// webURL is the console's base URL for login links: web.public_url, else
// the address HTTP listens on.
func (s *Server) webURL() string {
	if s.cfg.Web.PublicURL != "" {
		return strings.TrimRight(s.cfg.Web.PublicURL, "/")
	}
	return s.HTTPURL()
}
