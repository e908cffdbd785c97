package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"charm.land/ssh"
	gossh "golang.org/x/crypto/ssh"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/internal/errkind"
	"sbx.dev/sbx/internal/termtext"
	"sbx.dev/sbx/keys"
)

// Port forwarding: `ssh -L 3000:BOX:3000 -p 2222 GATEWAY` opens a
// direct-tcpip channel whose destination host is a box name; the bytes go
// to that port on the box's loopback through the core (fleet.DialPort:
// owner or admin, the box awake, audited), carried over the box's agent
// connection. Nothing else is forwarded: a destination that is not a box
// name (an address, localhost, a host name with a domain) is refused here,
// a box the caller may not see answers like a missing one, and the stock
// handler, which dials the gateway's own network, is never installed.
// Remote forwarding (tcpip-forward) has no handler at all.

const (
	// forwardDialTimeout bounds reaching the box's port.
	forwardDialTimeout = 30 * time.Second
	// maxForwardsPerConn bounds the forwarded connections one SSH
	// connection holds open at once.
	maxForwardsPerConn = 64
)

// forwardData is the direct-tcpip payload (RFC 4254, 7.2).
type forwardData struct {
	DestAddr   string
	DestPort   uint32
	OriginAddr string
	OriginPort uint32
}

// errNotBox is a destination that is not a box name.
var errNotBox = errors.New("only a box name can be forwarded to (ssh -L PORT:BOX:PORT)")

// parseForward reads a direct-tcpip request and returns the box and port
// it names. The host must be a box name: box names are [A-Za-z0-9_.-], so
// an IPv6 address (colons) or a bracketed one never passes; an IPv4
// address, "localhost" and anything with a dot in it (a host name, a
// numeric address) are refused before any lookup.
func parseForward(extra []byte) (box string, port int, err error) {
	var d forwardData
	if err := gossh.Unmarshal(extra, &d); err != nil {
		return "", 0, fmt.Errorf("bad direct-tcpip request: %w", errkind.Invalid)
	}
	return checkForward(d.DestAddr, d.DestPort)
}

// checkForward validates a forward's destination host and port.
func checkForward(host string, port uint32) (string, int, error) {
	if port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %d: want 1 to 65535: %w", port, errkind.Invalid)
	}
	switch {
	case host == "":
		return "", 0, fmt.Errorf("empty destination: %w: %w", errNotBox, errkind.Invalid)
	case len(host) > 128:
		return "", 0, fmt.Errorf("destination of %d bytes: %w: %w", len(host), errNotBox, errkind.Invalid)
	case strings.EqualFold(host, "localhost"), strings.ContainsAny(host, ".:[]%"), net.ParseIP(host) != nil:
		return "", 0, fmt.Errorf("destination %q: %w: %w", host, errNotBox, errkind.Invalid)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", 0, fmt.Errorf("destination %q: %w: %w", host, errNotBox, errkind.Invalid)
		}
	}
	return host, int(port), nil
}

// forwards counts the live forwards of each SSH connection.
type forwards struct {
	mu sync.Mutex
	n  map[*gossh.ServerConn]int
}

// hold counts one more forward on conn, or says the connection has its
// maxForwardsPerConn; release undoes it.
func (f *forwards) hold(conn *gossh.ServerConn) (release func(), ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[*gossh.ServerConn]int{}
	}
	if f.n[conn] >= maxForwardsPerConn {
		return nil, false
	}
	f.n[conn]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n[conn]--; f.n[conn] <= 0 {
			delete(f.n, conn)
		}
	}, true
}

// directTCPIP serves one direct-tcpip channel: checks, then the core's
// DialPort, then both directions with their half-closes.
func (s *Server) directTCPIP(_ *ssh.Server, conn *gossh.ServerConn, nc gossh.NewChannel, ctx ssh.Context) {
	defer s.recover("direct-tcpip channel", conn.RemoteAddr().String())
	reject := func(reason gossh.RejectionReason, msg string) {
		_ = nc.Reject(reason, termtext.String(msg))
	}
	box, port, err := parseForward(nc.ExtraData())
	if err != nil {
		s.Logger.Info("ssh forward refused", "remote", conn.RemoteAddr().String(), "err", err)
		reject(gossh.Prohibited, err.Error())
		return
	}
	// The user from the key that really signed (charm.land/ssh puts it in
	// the context after the handshake), never from a key only offered.
	pk, _ := ctx.Value(ssh.ContextKeyPublicKey).(ssh.PublicKey)
	if pk == nil {
		reject(gossh.Prohibited, "permission denied")
		return
	}
	user, err := s.Identity.UserByPublicKey(ctx, pk)
	if err != nil {
		s.Logger.Info("ssh forward refused", "remote", conn.RemoteAddr().String(), "err", err)
		reject(gossh.Prohibited, "permission denied")
		return
	}
	if s.Fleet == nil {
		reject(gossh.ConnectionFailed, s.noFleet().Error())
		return
	}
	release, ok := s.forwards.hold(conn)
	if !ok {
		reject(gossh.ResourceShortage, fmt.Sprintf("too many forwarded connections on this SSH connection (limit %d)", maxForwardsPerConn))
		return
	}
	defer release()
	actor := keys.Actor{User: user.Name, Role: user.Role, Front: "ssh", Addr: clientOf(conn.RemoteAddr())}
	dctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
	bc, err := s.Fleet.DialPort(dctx, actor, box, port)
	cancel()
	if err != nil {
		s.Logger.Info("ssh forward refused", "user", user.Name, "box", box, "port", port, "err", err)
		reason := gossh.ConnectionFailed
		if errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrForbidden) || errors.Is(err, fleet.ErrInvalid) {
			reason = gossh.Prohibited
		}
		reject(reason, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		bc.Close()
		return
	}
	go gossh.DiscardRequests(reqs)
	s.Logger.Info("ssh forward", "user", user.Name, "box", box, "port", port)
	// The connection ending (or the gateway shutting down) ends the forward.
	stop := context.AfterFunc(ctx, func() { bc.Close(); ch.Close() })
	defer stop()
	pipe(ch, bc)
}

// pipe copies both ways; each side's end of data half-closes the other,
// and an error either way ends both.
func pipe(ch gossh.Channel, bc net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	abort := sync.OnceFunc(func() { bc.Close(); ch.Close() })
	go func() { // client → box
		defer wg.Done()
		if _, err := io.Copy(bc, ch); err != nil {
			abort()
			return
		}
		if cw, ok := bc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	go func() { // box → client
		defer wg.Done()
		if _, err := io.Copy(ch, bc); err != nil {
			abort()
			return
		}
		_ = ch.CloseWrite()
	}()
	wg.Wait()
	bc.Close()
	ch.Close()
}
