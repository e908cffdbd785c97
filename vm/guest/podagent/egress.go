package podagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"sbx.dev/sbx/vm/fwd"
)

// EgressSocket is where gateways attach to carry the box's egress. A
// gateway execs `sbx pod-agent bridge --socket EgressSocket` through the
// API server, names itself with the ClientHeader line, then runs yamux over
// the exec stream as the client; for every TCP connection the box opens to
// the egress address the agent opens a stream to the gateway that attached
// last. The gateway knows which box a stream is from by the Pod it exec'd
// into, never by anything the box says, as a QEMU box's socket tells. No
// gateway attached: the box sees its connection close, as a QEMU box does
// when the gateway's socket is missing.
const EgressSocket = "/run/sbx/egress.sock"

// egressHub hands each box connection to the most recently attached
// gateway session that still takes streams.
type egressHub struct {
	log      *slog.Logger
	mu       sync.Mutex
	sessions []*egressSession // oldest first
}

type egressSession struct {
	client string
	s      *yamux.Session
}

// ServeEgress listens on addr (the gateway address inside the box, on
// loopback) for the box's connections and on socket for gateways, until
// ctx ends.
func ServeEgress(ctx context.Context, addr, socket string, log *slog.Logger) error {
	box, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pod agent egress: %w", err)
	}
	defer box.Close()
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return fmt.Errorf("pod agent egress: %w", err)
	}
	os.Remove(socket) // a stale socket of an earlier run of this container
	gws, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("pod agent egress: %w", err)
	}
	defer gws.Close()
	if err := os.Chmod(socket, 0o600); err != nil {
		return fmt.Errorf("pod agent egress: %w", err)
	}
	context.AfterFunc(ctx, func() { box.Close(); gws.Close() })
	h := &egressHub{log: log}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer h.closeAll()
	errc := make(chan error, 2)
	accept := func(ln net.Listener, serve func(net.Conn)) {
		for {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			wg.Go(func() { serve(c) })
		}
	}
	go accept(gws, func(c net.Conn) { h.attach(ctx, c) })
	go accept(box, func(c net.Conn) { h.forward(ctx, c) })
	log.Info("pod agent egress ready", "addr", addr, "socket", socket)
	err = <-errc
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("pod agent egress: accept: %w", err)
}

// EgressYamux is the yamux configuration of both ends of an egress session.
func EgressYamux() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.MaxStreamWindowSize = 1 << 20
	return cfg
}

// attach serves one gateway's session until it ends. A newer session of
// the same gateway replaces its older one.
func (h *egressHub) attach(ctx context.Context, c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	id, conn, err := readClient(c)
	if err != nil {
		h.log.Warn("pod agent egress: a gateway connection without a usable first line", "err", err)
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	// Counted before the session answers anything: a gateway whose ping
	// came back may rely on the next box connection reaching it.
	h.mu.Lock()
	s, err := yamux.Server(conn, EgressYamux())
	if err != nil {
		h.mu.Unlock()
		c.Close()
		return
	}
	es := &egressSession{client: id, s: s}
	h.sessions = slices.DeleteFunc(h.sessions, func(o *egressSession) bool {
		if o.client == id {
			o.s.Close()
			return true
		}
		return false
	})
	h.sessions = append(h.sessions, es)
	h.mu.Unlock()
	h.log.Info("pod agent egress: gateway attached", "client", id)
	select {
	case <-s.CloseChan():
	case <-ctx.Done():
		s.Close()
	}
	h.drop(es)
}

func (h *egressHub) drop(es *egressSession) {
	h.mu.Lock()
	h.sessions = slices.DeleteFunc(h.sessions, func(o *egressSession) bool { return o == es })
	h.mu.Unlock()
}

func (h *egressHub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, es := range h.sessions {
		es.s.Close()
	}
	h.sessions = nil
}

// forward carries one box connection to a gateway: the newest session
// first, an older one when a stream cannot be opened on it.
func (h *egressHub) forward(ctx context.Context, c net.Conn) {
	for {
		h.mu.Lock()
		var es *egressSession
		if n := len(h.sessions); n > 0 {
			es = h.sessions[n-1]
		}
		h.mu.Unlock()
		if es == nil {
			c.Close()
			return
		}
		st, err := es.s.OpenStream()
		if err != nil {
			es.s.Close()
			h.drop(es)
			continue
		}
		if err := fwd.Pipe(ctx, c, fwd.HalfCloser{Conn: st}); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
			h.log.Debug("pod agent egress: connection ended", "client", es.client, "err", err)
		}
		return
	}
}
