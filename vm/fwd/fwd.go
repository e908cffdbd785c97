// Package fwd is the host end of a box's one network path. QEMU's user-mode
// network (-netdev user,restrict=on,guestfwd=…-cmd:) starts a program for
// every TCP connection the guest opens to vm.EgressAddr, with that
// connection on the program's stdin, stdout and stderr. The program is the
// sbx binary itself, run as `sbx vm-fwd SOCKET`: it joins the connection to
// the gateway's unix socket for the box and exits when both directions have
// ended, or either side fails.
package fwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Command is the hidden subcommand QEMU runs: `<sbx> vm-fwd SOCKET`.
const Command = "vm-fwd"

// Main serves the guest connection on fds 0-2 by joining it to socket.
// Nothing is ever written to fd 2: it is the guest's connection too, so an
// error message (or a Go panic) would reach the box. Main points fd 2 at
// /dev/null first; its error is only for a caller that logs elsewhere.
func Main(ctx context.Context, socket string) error {
	if err := silenceStderr(); err != nil {
		return err
	}
	guest, err := net.FileConn(os.Stdin)
	if err != nil {
		return fmt.Errorf("vm-fwd: stdin is not the guest connection: %w", err)
	}
	return Join(ctx, guest, socket)
}

func silenceStderr() error {
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("vm-fwd: open /dev/null: %w", err)
	}
	defer unix.Close(null)
	if err := unix.Dup3(null, 2, 0); err != nil {
		return fmt.Errorf("vm-fwd: silence stderr: %w", err)
	}
	return nil
}

// Join copies guest ⇄ a new connection to the unix socket until both
// directions end (see Pipe). Join closes guest. When socket cannot be
// dialed the guest sees its connection close.
func Join(ctx context.Context, guest net.Conn, socket string) error {
	defer guest.Close()
	var d net.Dialer
	gw, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return fmt.Errorf("vm-fwd: %w", err)
	}
	return Pipe(ctx, guest, gw)
}

// Pipe copies a ⇄ b until both directions end, then closes both. A
// direction that ends cleanly half-closes the other side (an HTTP client
// may send its request and shut down its write side); a failed read or
// write, or ctx ending, closes both at once. A yamux stream half-closes
// with Close: wrap it in HalfCloser.
func Pipe(ctx context.Context, a, b net.Conn) error {
	defer a.Close()
	defer b.Close()
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- pipe(b, a) }()
	go func() { errc <- pipe(a, b) }()
	if err := <-errc; err != nil {
		return err // the deferred closes end the other direction
	}
	err := <-errc
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// HalfCloser gives a stream whose Close only ends its write side (a yamux
// stream: Close sends FIN and reads go on) the CloseWrite Pipe looks for.
type HalfCloser struct{ net.Conn }

// CloseWrite ends the write side.
func (h HalfCloser) CloseWrite() error { return h.Conn.Close() }

// pipe copies src to dst, then half-closes dst.
func pipe(dst, src net.Conn) error {
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("vm-fwd: %w", err)
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("vm-fwd: %w", err)
		}
	}
	return nil
}

// NewCommand is the hidden `sbx vm-fwd SOCKET` that QEMU runs for each
// connection a box opens to the egress address: it joins that connection
// (fds 0-2) to the gateway's unix socket for the box. Not for people. It
// lives here, not in package vm, so the guest binary that carries it links
// none of the host's VM code.
func NewCommand() *cobra.Command {
	return &cobra.Command{
		Use:    Command + " SOCKET",
		Short:  "Join one egress connection of a box to the gateway (run by QEMU)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return Main(cmd.Context(), args[0])
		},
	}
}
