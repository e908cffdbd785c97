// Package podagent is the sbx binary's life inside a box Pod on Kubernetes
// (`sbx pod-agent`), the counterpart of vm/guest/pid1 for the QEMU backend.
//
// The Pod's only container runs `sbx pod-agent serve` as its PID 1: it reaps
// orphans and serves the agent protocol (vm/agent) on a Unix socket inside
// the container, /run/sbx/agent.sock, reachable from nothing outside the
// container. The gateway reaches it by exec'ing `sbx pod-agent bridge` through
// the API server: the bridge copies the exec's stdin/stdout to and from that
// socket, so the exec stream is the agent byte stream, exactly like the
// virtio-serial port of a QEMU box. One agent outlives many bridges: processes
// started through one gateway connection keep running when it ends.
//
// Several gateways reach the same box (a cluster shares its boxes): each
// names itself in a first line of its stream (ClientHeader, before the
// agent's hello), and each client has its own agent session, so one
// gateway's connection never cuts another's. Within one client a newer
// connection replaces an older one (a gateway that reconnects never waits
// for its stale stream to time out). A stream without the line is the
// client "". An agent older than the line skips it: the hello is searched
// for.
//
// `sbx pod-agent stats` prints the container's CPU time and private memory
// from its cgroup (v1 or v2) as JSON, for the backend's Stats.
package podagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/guest/agentd"
	"sbx.dev/sbx/vm/guest/pid1"
)

// Socket is where the agent listens inside the box container.
const Socket = "/run/sbx/agent.sock"

// Workspace is the box's workspace mount (the PersistentVolumeClaim).
const Workspace = "/workspace"

// NewCommand returns `sbx pod-agent` with its serve, bridge and stats
// subcommands.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:    "pod-agent",
		Short:  "The agent inside a box Pod on Kubernetes (serve, bridge, stats)",
		Hidden: true,
	}
	var socket, workspace, egress, egressSocket string
	var debug, noNetwork bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the agent protocol on the box's Unix socket (the Pod's PID 1)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			var gateway netip.AddrPort
			if egress != "" {
				var err error
				if gateway, err = netip.ParseAddrPort(egress); err != nil {
					return fmt.Errorf("--egress %q: want IP:port: %w", egress, err)
				}
			}
			if noNetwork || egress != "" {
				// Fail closed: a box meant to have no network (or only the
				// egress path) does not start with one.
				gone, err := isolateNetwork(gateway.Addr())
				if err != nil {
					return err
				}
				log.Info("network removed", "interfaces", gone, "egress", egress)
			}
			// The box's unprivileged user, as the QEMU guest's init makes
			// it: the agent's turns and exec run as it.
			if err := pid1.ProvisionAgentUser("/", workspace); err != nil {
				return fmt.Errorf("pod agent: the agent user: %w", err)
			}
			if err := pid1.StartHookBroker(ctx, workspace, log); err != nil {
				return fmt.Errorf("pod agent: %w", err)
			}
			// The agent and the egress listener live and end together.
			run, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 2)
			go func() { errc <- Serve(run, socket, workspace, log) }()
			if egress != "" {
				go func() { errc <- ServeEgress(run, egress, egressSocket, log) }()
			}
			err := <-errc
			cancel()
			if egress != "" {
				<-errc
			}
			if ctx.Err() != nil {
				return nil // asked to stop (the Pod is being deleted)
			}
			return err
		},
	}
	serve.Flags().StringVar(&socket, "socket", Socket, "Unix socket to listen on")
	serve.Flags().StringVar(&workspace, "workspace", Workspace, "directory every file call is confined to")
	serve.Flags().BoolVar(&debug, "debug", false, "log at debug level")
	serve.Flags().BoolVar(&noNetwork, "no-network", false, "delete every interface but loopback first (needs CAP_NET_ADMIN, then dropped)")
	serve.Flags().StringVar(&egress, "egress", "", "IP:port on loopback where the box reaches the gateway (implies --no-network; see EgressSocket)")
	serve.Flags().StringVar(&egressSocket, "egress-socket", EgressSocket, "Unix socket gateways attach to for the box's egress")
	bridge := &cobra.Command{
		Use:   "bridge",
		Short: "Copy stdin/stdout to and from the agent's socket (run through exec by the gateway)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Bridge(cmd.Context(), socket, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	bridge.Flags().StringVar(&socket, "socket", Socket, "the agent's Unix socket")
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Print the container's CPU time and private memory as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := ReadStats("/sys/fs/cgroup")
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
		},
	}
	root.AddCommand(serve, bridge, stats)
	return root
}

// Serve listens on socket and serves the agent protocol until ctx ends.
func Serve(ctx context.Context, socket, workspace string, log *slog.Logger) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return fmt.Errorf("pod agent: %w", err)
	}
	os.Remove(socket) // a stale socket of an earlier run of this container
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("pod agent: listen: %w", err)
	}
	defer ln.Close()
	if err := os.Chmod(socket, 0o600); err != nil {
		return fmt.Errorf("pod agent: %w", err)
	}
	opts := agentd.ServerOptions{
		Root:   workspace,
		Logger: log,
		// A container shares the node's clock and may not set it; the
		// manager sets the clock after every boot, so agree and do nothing.
		SetClock: func(time.Time) error { return nil },
	}
	if os.Getpid() == 1 {
		// PID 1 of the container's PID namespace inherits every orphan.
		opts.Reaper = agentd.NewChildReaper(ctx, log)
	}
	r := &router{ctx: ctx, log: log, opts: opts, clients: map[string]*latest{}}
	context.AfterFunc(ctx, func() { ln.Close() })
	log.Info("pod agent ready", "socket", socket, "workspace", workspace)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pod agent: accept: %w", err)
		}
		wg.Go(func() { r.route(c, &wg) })
	}
}

// ClientHeader starts the line a gateway sends first on its stream to name
// itself: ClientHeader + id + "\n" (id: at most MaxClientID bytes, no
// newline).
const ClientHeader = "#sbx-client "

// MaxClientID bounds a client's name; MaxClients the sessions kept (the
// least recently connected idle one goes first).
const (
	MaxClientID = 128
	MaxClients  = 32
)

// router gives each client (gateway) its own agent session.
type router struct {
	ctx     context.Context
	log     *slog.Logger
	opts    agentd.ServerOptions
	mu      sync.Mutex
	clients map[string]*latest
}

// route reads the client's name (when it sends one) and hands the
// connection to that client's session, starting it on first use.
func (r *router) route(c net.Conn, wg *sync.WaitGroup) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	stop := context.AfterFunc(r.ctx, func() { c.Close() })
	id, conn, err := readClient(c)
	stop()
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		r.log.Warn("pod agent: a connection without a usable first line", "err", err)
		c.Close()
		return
	}
	r.mu.Lock()
	l := r.clients[id]
	if l == nil {
		if len(r.clients) >= MaxClients {
			r.evictLocked()
		}
		ctx, cancel := context.WithCancel(r.ctx)
		l = &latest{next: make(chan net.Conn), ctx: ctx, cancel: cancel}
		r.clients[id] = l
		wg.Go(func() { _ = agentd.Serve(ctx, agentd.PortOpenerFunc(l.open), r.opts) })
	}
	l.used = time.Now()
	r.mu.Unlock()
	l.offer(conn)
}

// evictLocked ends the session of the least recently connected client.
func (r *router) evictLocked() {
	var oldest *latest
	var id string
	for k, l := range r.clients {
		if oldest == nil || l.used.Before(oldest.used) {
			oldest, id = l, k
		}
	}
	if l := oldest; l != nil {
		l.cancel()
		delete(r.clients, id)
		r.log.Info("pod agent: ended the session of the least recent client", "client", id)
	}
}

// readClient reads the optional first line naming the client. The agent's
// hello never starts with '#', so one byte tells.
func readClient(c net.Conn) (string, net.Conn, error) {
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return "", nil, err
	}
	if first[0] != ClientHeader[0] {
		return "", &prefixed{Conn: c, r: io.MultiReader(bytes.NewReader(first[:]), c)}, nil
	}
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return "", nil, err
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
		if 1+len(line) > len(ClientHeader)+MaxClientID { // first byte + line = header + id
			return "", nil, errors.New("client line too long")
		}
	}
	id, ok := strings.CutPrefix(string(first[:])+string(line), ClientHeader)
	if !ok {
		return "", nil, fmt.Errorf("first line %q is not a client line", string(first[:])+string(line))
	}
	return id, c, nil
}

// prefixed is a connection whose first bytes were already read.
type prefixed struct {
	net.Conn
	r io.Reader
}

func (p *prefixed) Read(b []byte) (int, error) { return p.r.Read(b) }

// latest hands one client's connections to its agent session one at a
// time; a newer connection closes the older one, so the newest wins.
type latest struct {
	next   chan net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	used   time.Time // guarded by router.mu
	mu     sync.Mutex
	cur    net.Conn
}

// offer closes the client's current connection (its session ends and asks
// for the next) and hands over c.
func (l *latest) offer(c net.Conn) {
	l.mu.Lock()
	if l.cur != nil {
		l.cur.Close()
	}
	l.mu.Unlock()
	select {
	case l.next <- c:
	case <-l.ctx.Done():
		c.Close()
	}
}

func (l *latest) open(ctx context.Context) (io.ReadWriteCloser, error) {
	select {
	case c := <-l.next:
		l.mu.Lock()
		l.cur = c
		l.mu.Unlock()
		context.AfterFunc(l.ctx, func() { c.Close() })
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Bridge connects to the agent's socket (waiting up to 10 s for it to
// appear: the exec may race the container's start) and copies in to the
// socket and the socket to out until either side ends.
func Bridge(ctx context.Context, socket string, in io.Reader, out io.Writer) error {
	var c net.Conn
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", socket)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("pod agent bridge: %w", err)
	}
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(c, in)
		// The gateway closed its side: end the session (the agent keeps
		// running and takes the next connection).
		c.Close()
		done <- err
	}()
	go func() {
		_, err := io.Copy(out, c)
		done <- err
	}()
	err = <-done
	c.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Stats is what `pod-agent stats` prints.
type Stats struct {
	// CPUNanos is the container's cumulative CPU time.
	CPUNanos int64 `json:"cpu_ns"`
	// PrivateBytes is anonymous memory (RSS without page cache).
	PrivateBytes int64 `json:"private_bytes"`
}

// ReadStats reads the container's own cgroup under root: cgroup v2
// (cpu.stat, memory.stat) or v1 (cpuacct.usage, memory.stat).
func ReadStats(root string) (Stats, error) {
	var s Stats
	if b, err := os.ReadFile(filepath.Join(root, "cpu.stat")); err == nil {
		usec, ok := field(string(b), "usage_usec")
		if !ok {
			return s, errors.New("cgroup v2 cpu.stat: no usage_usec")
		}
		s.CPUNanos = usec * 1000
		m, err := os.ReadFile(filepath.Join(root, "memory.stat"))
		if err != nil {
			return s, fmt.Errorf("cgroup v2: %w", err)
		}
		s.PrivateBytes, _ = field(string(m), "anon")
		return s, nil
	}
	b, err := os.ReadFile(filepath.Join(root, "cpuacct", "cpuacct.usage"))
	if err != nil {
		return s, fmt.Errorf("no cgroup v2 cpu.stat and no v1 cpuacct.usage: %w", err)
	}
	if s.CPUNanos, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return s, fmt.Errorf("cgroup v1 cpuacct.usage: %w", err)
	}
	m, err := os.ReadFile(filepath.Join(root, "memory", "memory.stat"))
	if err != nil {
		return s, fmt.Errorf("cgroup v1: %w", err)
	}
	if v, ok := field(string(m), "total_rss"); ok {
		s.PrivateBytes = v
	} else {
		s.PrivateBytes, _ = field(string(m), "rss")
	}
	return s, nil
}

// field finds "key value" in a cgroup stat file.
func field(text, key string) (int64, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
