// Package agentd is the guest's end of the agent protocol (vm/agent): Serve
// answers the host's Client inside a box — files confined to /workspace,
// processes (as root or dropped to the agent user), the clock, entropy and
// power — for PID 1 (vm/guest/pid1) and the Kubernetes pod agent.
package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/vm/agent"
)

// PortOpener opens the byte stream to the host (in a box: the sbx.agent
// virtio-serial port). Serve calls it again after every broken connection.
type PortOpener interface {
	Open(ctx context.Context) (io.ReadWriteCloser, error)
}

// PortOpenerFunc adapts a function to PortOpener.
type PortOpenerFunc func(ctx context.Context) (io.ReadWriteCloser, error)

// Open calls f.
func (f PortOpenerFunc) Open(ctx context.Context) (io.ReadWriteCloser, error) { return f(ctx) }

// ServerOptions configure Serve.
type ServerOptions struct {
	// Root is the directory every file call is confined to; default "/workspace".
	Root string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Env is the base environment of executed processes (the request's Env is
	// appended); default PATH and HOME=/root.
	Env []string
	// Reaper waits for started processes; default: wait4 on each pid, which is
	// right unless this process also reaps orphans (PID 1).
	Reaper Reaper
	// Shutdown powers the machine off; nil refuses the call.
	Shutdown func(ctx context.Context) error
	// SetClock sets the wall clock; default clock_settime(CLOCK_REALTIME).
	SetClock func(time.Time) error
	// WatchInterval is the poll period of Watch; default 100ms.
	WatchInterval time.Duration

	// NoExecStream answers agent.OpExecStream as agents before it did:
	// the client's fallback to the four-stream exec is tested against it
	// (vm/agent's tests, which cannot reach an unexported field from here).
	NoExecStream bool
}

// DefaultEnv is the environment every executed process starts from.
var defaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
}

// redialDelay is how long Serve waits before reopening the port after the
// host went away; with no host connected the port reads EOF at once.
const redialDelay = 10 * time.Millisecond

// Serve answers the host until ctx ends: open the port, wait for a hello,
// echo it, serve yamux until the connection breaks, repeat.
//
// A port that is a character device (the virtio-serial port) stays open
// across host connections: closing it makes QEMU drop the host's socket, so
// a host connecting while the guest reopens would be cut off. With no host
// connected its reads return EOF at once; Serve then waits redialDelay
// between reads instead of spinning. Other ports (sockets, pipes in tests)
// are closed and reopened after each connection.
func Serve(ctx context.Context, port PortOpener, opts ServerOptions) error {
	s, err := newServer(opts)
	if err != nil {
		return err
	}
	defer s.close()
	for ctx.Err() == nil {
		conn, err := port.Open(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.log.Warn("agent: open port", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if f, ok := conn.(*os.File); ok && isCharDevice(f) {
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			for ctx.Err() == nil {
				_ = f.SetReadDeadline(time.Time{})
				if err := s.serveConn(ctx, &persistentPort{ctx: ctx, c: f}); err != nil && !errors.Is(err, io.EOF) {
					s.log.Warn("agent: port failed, reopening", "err", err)
					break
				}
			}
			stop()
		} else {
			_ = s.serveConn(ctx, conn)
		}
		conn.Close()
		sleep(ctx, redialDelay)
	}
	return ctx.Err()
}

func isCharDevice(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// persistentPort is one host session on a port that stays open: until the
// handshake is done an EOF means "no host yet" and is waited out; after it,
// EOF means the host left and ends the session. Close does not close the port.
type persistentPort struct {
	ctx    context.Context
	c      *os.File
	joined atomic.Bool // the handshake is done
	closed atomic.Bool
}

func (p *persistentPort) Read(b []byte) (int, error) {
	for {
		n, err := p.c.Read(b)
		if p.closed.Load() {
			return 0, io.EOF
		}
		if n > 0 || err != io.EOF || p.joined.Load() {
			return n, err
		}
		sleep(p.ctx, redialDelay)
		if err := p.ctx.Err(); err != nil {
			return 0, err
		}
	}
}

func (p *persistentPort) Write(b []byte) (int, error) { return p.c.Write(b) }

// Close ends the session, not the port: a read still pending is woken by a
// deadline (the next session clears it).
func (p *persistentPort) Close() error {
	p.closed.Store(true)
	_ = p.c.SetReadDeadline(time.Now())
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type server struct {
	root   string
	rootFD int
	log    *slog.Logger
	opts   ServerOptions
	env    []string
	reaper Reaper
	start  time.Time
}

func newServer(opts ServerOptions) (*server, error) {
	s := &server{root: opts.Root, log: opts.Logger, opts: opts, env: opts.Env, reaper: opts.Reaper, start: time.Now()}
	if s.root == "" {
		s.root = "/workspace"
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.env == nil {
		s.env = defaultEnv
	}
	if s.reaper == nil {
		s.reaper = waitEach{}
	}
	if s.opts.WatchInterval <= 0 {
		s.opts.WatchInterval = 100 * time.Millisecond
	}
	fd, err := unix.Open(s.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: open root %s: %w", s.root, err)
	}
	s.rootFD = fd
	return s, nil
}

func (s *server) close() { unix.Close(s.rootFD) }

// serveConn runs one host connection to its end. The error says why the
// connection could not start; io.EOF when the host went away.
func (s *server) serveConn(ctx context.Context, conn io.ReadWriteCloser) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	gc, err := agent.GuestHandshake(conn)
	if err != nil {
		if !errors.Is(err, io.EOF) && ctx.Err() == nil {
			s.log.Debug("agent: handshake", "err", err)
		}
		return err
	}
	if pp, ok := conn.(*persistentPort); ok {
		pp.joined.Store(true)
	}
	sess, err := yamux.Server(agent.JoinFrames(gc), agent.YamuxConfig(false))
	if err != nil {
		s.log.Warn("agent: start yamux", "err", err)
		return err
	}
	defer sess.Close()
	s.log.Debug("agent: host connected")
	c := &connState{srv: s, execs: map[uint64]*pendingExec{}, procs: map[uint64]*process{}}
	// Handlers are not waited for: a process started on this connection
	// keeps running after the host goes away (its stdio is closed), so a
	// gateway restart does not kill a box's work.
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			s.log.Debug("agent: host gone", "err", err)
			return io.EOF
		}
		go func() {
			defer st.Close()
			// In a box this process is PID 1: a bug in one call must not
			// take the machine down.
			defer func() {
				if r := recover(); r != nil {
					s.log.Error("agent: call panicked", "panic", r, "stack", string(debug.Stack()))
				}
			}()
			c.handle(ctx, st)
		}()
	}
}

// connState is what one connection's streams share: four-stream exec calls
// waiting for their stdio streams, and the processes of one-stream execs
// (for resize and signal calls).
type connState struct {
	srv   *server
	mu    sync.Mutex
	execs map[uint64]*pendingExec
	procs map[uint64]*process // by exec id; nil while starting
}

func (c *connState) handle(ctx context.Context, st *yamux.Stream) {
	var req agent.Request
	if err := agent.ReadFrame(st, &req); err != nil {
		c.srv.log.Debug("agent: bad request", "err", err)
		return
	}
	s := c.srv
	answer := func(rep agent.Reply, err error) {
		rep.ID = req.ID
		rep.Err = agent.ToWire(err)
		if err := agent.WriteFrame(st, rep); err != nil {
			s.log.Debug("agent: reply", "op", req.Op, "err", err)
		}
	}
	switch req.Op {
	case agent.OpPing:
		h := s.health()
		answer(agent.Reply{Health: &h}, nil)
	case agent.OpExec:
		c.exec(ctx, st, req)
	case agent.OpAttach:
		c.attach(st, req)
	case agent.OpExecStream:
		if s.opts.NoExecStream {
			answer(agent.Reply{}, fmt.Errorf("unknown op %q: %w", req.Op, errInvalid))
			return
		}
		c.execStream(st, req)
	case agent.OpResize, agent.OpSignal:
		answer(agent.Reply{}, c.control(req))
	case agent.OpStat:
		fi, err := s.stat(req.Path)
		answer(agent.Reply{Info: &fi}, err)
	case agent.OpReadDir:
		infos, err := s.readDir(req.Path)
		// Big directories go out in batches so no frame nears MaxFrame.
		for err == nil && len(infos) > readDirBatch {
			if werr := agent.WriteFrame(st, agent.Reply{ID: req.ID, Infos: infos[:readDirBatch], More: true}); werr != nil {
				return
			}
			infos = infos[readDirBatch:]
		}
		answer(agent.Reply{Infos: infos}, err)
	case agent.OpMkdirAll:
		answer(agent.Reply{}, s.mkdirAll(req.Path, req.Mode))
	case agent.OpRemove:
		answer(agent.Reply{}, s.remove(req.Path))
	case agent.OpRead:
		s.readFile(st, req)
	case agent.OpTarOut:
		s.tarOut(st, req)
	case agent.OpWrite:
		s.writeFile(st, req)
	case agent.OpTarIn:
		s.tarIn(st, req)
	case agent.OpWatch:
		s.watch(ctx, st, req)
	case agent.OpDial:
		c.dial(ctx, st, req)
	case agent.OpClock:
		answer(agent.Reply{}, s.setClock(time.Unix(0, req.Time)))
	case agent.OpReseed:
		answer(agent.Reply{}, reseed(req.Data))
	case agent.OpShutdown:
		if s.opts.Shutdown == nil {
			answer(agent.Reply{}, errors.New("shutdown is not supported here"))
			return
		}
		// The hook schedules the power-off and returns, so its error still
		// reaches the host.
		answer(agent.Reply{}, s.opts.Shutdown(ctx))
	default:
		answer(agent.Reply{}, fmt.Errorf("unknown op %q: %w", req.Op, errInvalid))
	}
}

var errInvalid = os.ErrInvalid

// readDirBatch is the number of entries per ReadDir frame.
const readDirBatch = 1000

func (s *server) health() agent.Health {
	h := agent.Health{Time: time.Now(), Root: s.root, Version: agent.ProtocolVersion}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		unit := uint64(si.Unit)
		h.MemTotal = si.Totalram * unit
		h.MemFree = (si.Freeram + si.Bufferram) * unit
		h.Procs = int(si.Procs)
		h.Load1 = float64(si.Loads[0]) / 65536
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if d, err := time.ParseDuration(f[0] + "s"); err == nil {
				h.Uptime = d
			}
		}
	}
	return h
}

func (s *server) setClock(t time.Time) error {
	if s.opts.SetClock != nil {
		return s.opts.SetClock(t)
	}
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return fmt.Errorf("set clock to %s: %w", t.Format(time.RFC3339Nano), err)
	}
	return nil
}
