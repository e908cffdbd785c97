package hooks

// The broker: inside a box the hooks run as the agent's unprivileged user
// (Claude Code starts them), so a hook that decided and logged by itself
// would keep its decision log and the guard's session state where the agent
// can write them — and the agent could edit the log, forget its taint, or
// point the hook at another workspace through the environment its own
// settings give Claude Code. Instead the box's root guest agent serves
// decisions on a Unix socket: the hook process forwards its payload and
// prints the verdict; the root side decides with its own workspace, log
// and state, and records who asked (the peer's uid and pid from the
// kernel). The agent may ask the broker anything, as the hook would; every
// answer is a real decision, logged as such.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/hooks/toolcall"
)

// BrokerSocket is where a box's root guest agent serves hook decisions. It
// is fixed, never taken from the environment: the agent's own settings can
// set the environment its hooks run with.
const BrokerSocket = "/run/sbx/hooks.sock"

// BrokerState is the guard's session state when the broker decides: root's,
// outside the workspace.
const BrokerState = "/var/lib/sbx/hooks-state"

// brokerDeadline bounds one exchange; a hook that hears nothing denies.
const brokerDeadline = selfDeadline - 2*time.Second

// brokerParallel is how many decisions the broker makes at once.
const brokerParallel = 4

// brokerRequest is what a hook process sends: its arguments, the two
// environment values the decision may depend on, and Claude Code's payload.
type brokerRequest struct {
	Args    []string `json:"args"`
	Home    string   `json:"home,omitempty"`
	Lane    string   `json:"lane,omitempty"`
	Payload []byte   `json:"payload"`
}

// brokerReply is the verdict: the exit status the hook must end with and
// what it prints on stderr.
type brokerReply struct {
	Code   int    `json:"code"`
	Stderr string `json:"stderr,omitempty"`
}

// Broker decides hooks for processes that run as the agent. Workspace, Log
// and State are the root side's own; nothing the hook sends moves them.
type Broker struct {
	Workspace string // default DefaultWorkspace
	Log       string // default Workspace/LogFile
	State     string // default BrokerState
	// Home is the agent's home the guard protects; "" takes the hook's
	// HOME (the managed settings pin it too).
	Home   string
	Logger *slog.Logger
}

// ListenBroker makes path's directory (root's, 0755) and listens there; the
// socket is 0666 so the agent's hooks may connect. A stale socket from an
// earlier boot is replaced.
func ListenBroker(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hook broker: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hook broker: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("hook broker: remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("hook broker: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hook broker: %w", err)
	}
	return ln, nil
}

// Serve answers hook processes on ln until ctx ends.
func (b Broker) Serve(ctx context.Context, ln net.Listener) error {
	if b.Logger == nil {
		b.Logger = slog.Default()
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	// A request may carry a 64 MiB Write: a few at a time, so a flood of
	// them from the agent cannot exhaust PID 1's memory. Claude Code runs
	// the hooks of one call one after another anyway.
	busy := make(chan struct{}, brokerParallel)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("hook broker: accept: %w", err)
		}
		wg.Go(func() {
			select {
			case busy <- struct{}{}:
				defer func() { <-busy }()
				b.answer(c)
			case <-time.After(brokerDeadline):
				c.Close() // the hook hears nothing and denies
			case <-ctx.Done():
				c.Close()
			}
		})
	}
}

// answer reads one request and writes one reply. Anything malformed is
// answered with a deny.
func (b Broker) answer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(brokerDeadline))
	peer := peerOf(c)
	if err := json.NewEncoder(c).Encode(b.reply(c, peer)); err != nil {
		b.Logger.Warn("hook broker: reply", "peer", peer, "err", err)
	}
}

// reply reads one request from r and decides it.
func (b Broker) reply(r io.Reader, peer Peer) brokerReply {
	var req brokerRequest
	// The payload travels base64 in JSON: a third larger than toolcall.MaxInput.
	if err := json.NewDecoder(io.LimitReader(r, 2*toolcall.MaxInput+4096)).Decode(&req); err != nil {
		return brokerReply{Code: ExitDeny, Stderr: fmt.Sprintf("sbx hook: the hook broker could not read the request (%v); denying\n", err)}
	}
	return b.decide(req, peer)
}

func (b Broker) decide(req brokerRequest, peer Peer) brokerReply {
	cfg := Config{Workspace: b.Workspace, Log: b.Log, State: b.State, Home: b.Home, Lane: req.Lane, Peer: &peer}
	if cfg.Home == "" {
		cfg.Home = req.Home
	}
	if cfg.Workspace == "" {
		cfg.Workspace = DefaultWorkspace
	}
	if cfg.State == "" {
		cfg.State = BrokerState
	}
	var stderr strings.Builder
	code := decide(req.Args, bytes.NewReader(req.Payload), &stderr, cfg, true)
	return brokerReply{Code: code, Stderr: stderr.String()}
}

// Peer is who asked the broker, as the kernel says (SO_PEERCRED).
type Peer struct {
	UID int `json:"uid"`
	PID int `json:"pid"`
}

func peerOf(c net.Conn) Peer {
	p := Peer{UID: -1, PID: -1}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return p
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p
	}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			p = Peer{UID: int(cred.Uid), PID: int(cred.Pid)}
		}
	})
	return p
}

// viaBroker forwards a hook to the broker at socket. It returns false when
// there is no broker there (a host, or a box without one): the hook then
// decides by itself. A broker that exists but does not answer is a deny.
func viaBroker(socket string, args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) (code int, used bool) {
	if _, err := os.Lstat(socket); errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	fail := func(format string, a ...any) (int, bool) {
		fmt.Fprintf(stderr, "sbx hook: the hook broker at %s %s; denying\n", socket, fmt.Sprintf(format, a...))
		return ExitDeny, true
	}
	payload, err := io.ReadAll(io.LimitReader(stdin, toolcall.MaxInput+1))
	if err != nil {
		return fail("got no payload: %v", err)
	}
	c, err := net.DialTimeout("unix", socket, 2*time.Second)
	if err != nil {
		return fail("cannot be reached: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(brokerDeadline))
	w := bufio.NewWriter(c)
	if err := json.NewEncoder(w).Encode(brokerRequest{Args: args, Home: getenv("HOME"), Lane: getenv("SBX_LANE"), Payload: payload}); err != nil {
		return fail("was not sent the request: %v", err)
	}
	if err := w.Flush(); err != nil {
		return fail("was not sent the request: %v", err)
	}
	var reply brokerReply
	if err := json.NewDecoder(io.LimitReader(c, 1<<20)).Decode(&reply); err != nil {
		return fail("did not answer: %v", err)
	}
	io.WriteString(stderr, reply.Stderr)
	if reply.Code != ExitAllow {
		return ExitDeny, true
	}
	return ExitAllow, true
}
