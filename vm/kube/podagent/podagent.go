// Package podagent is the sbx binary's life inside a box Pod on Kubernetes
// (`sbx pod-agent`), the counterpart of vm/guest for the QEMU backend.
//
// The Pod's only container runs `sbx pod-agent serve` as its PID 1: it reaps
// orphans and serves the agent protocol (vm/agent) on a Unix socket inside
// the container, /run/sbx/agent.sock, reachable from nothing outside the
// container. The gateway reaches it by exec'ing `sbx pod-agent bridge` through
// the API server: the bridge copies the exec's stdin/stdout to and from that
// socket, so the exec stream is the agent byte stream, exactly like the
// virtio-serial port of a QEMU box. One agent outlives many bridges: processes
// started through one gateway connection keep running when it ends, and a
// newer connection replaces an older one (a restarted gateway never waits for
// its predecessor's stream to time out).
//
// `sbx pod-agent stats` prints the container's CPU time and private memory
// from its cgroup (v1 or v2) as JSON, for the backend's Stats.
package podagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"sbx.dev/sbx/vm/agent"
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
	var socket, workspace string
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
			if noNetwork {
				// Fail closed: a box meant to have no network does not start
				// with one.
				gone, err := isolateNetwork()
				if err != nil {
					return err
				}
				log.Info("network removed", "interfaces", gone)
			}
			err := Serve(ctx, socket, workspace, log)
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
	opts := agent.ServerOptions{
		Root:   workspace,
		Logger: log,
		// A container shares the node's clock and may not set it; the
		// manager sets the clock after every boot, so agree and do nothing.
		SetClock: func(time.Time) error { return nil },
	}
	if os.Getpid() == 1 {
		// PID 1 of the container's PID namespace inherits every orphan.
		opts.Reaper = agent.NewChildReaper(ctx, log)
	}
	l := newLatest(ctx, ln, log)
	log.Info("pod agent ready", "socket", socket, "workspace", workspace)
	return agent.Serve(ctx, agent.PortOpenerFunc(l.open), opts)
}

// latest hands out accepted connections one at a time; a connection
// accepted while another is being served closes the older one, so the
// newest gateway connection always wins.
type latest struct {
	next chan net.Conn
	mu   sync.Mutex
	cur  net.Conn
}

func newLatest(ctx context.Context, ln net.Listener, log *slog.Logger) *latest {
	l := &latest{next: make(chan net.Conn)}
	context.AfterFunc(ctx, func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil {
					log.Error("pod agent: accept", "err", err)
				}
				return
			}
			l.mu.Lock()
			if l.cur != nil {
				l.cur.Close() // its Serve session ends and asks for the next
			}
			l.mu.Unlock()
			select {
			case l.next <- c:
			case <-ctx.Done():
				c.Close()
				return
			}
		}
	}()
	return l
}

func (l *latest) open(ctx context.Context) (io.ReadWriteCloser, error) {
	select {
	case c := <-l.next:
		l.mu.Lock()
		l.cur = c
		l.mu.Unlock()
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
