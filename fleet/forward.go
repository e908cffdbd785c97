package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"

	"sbx.dev/sbx/audit"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/vm"
	"sbx.dev/sbx/vm/agent"
)

// DialPort connects to TCP port on the box's loopback (127.0.0.1 inside the
// box), carried over the box's agent connection, never over the box
// network: the SSH front's `ssh -L PORT:BOX:PORT` and the web preview use
// it. Owner or admin with the write right (the rule of attach and exec);
// the box must be awake (ErrConflict names its state: this does not wake
// it); nothing listening is ErrUnavailable. Every connection is an audit
// row (box.forward, the port); it changes no state, so it is no Event. The
// bytes are the box's own, not redacted (a byte stream of some protocol
// cannot be): the caller can read them in an attach shell anyway. ctx
// bounds the dial; the connection lives until closed (it has CloseWrite).
func (f *Fleet) DialPort(ctx context.Context, caller keys.Actor, name string, port int) (net.Conn, error) {
	if err := need(caller, keys.RightWrite, "forward a port"); err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535: %w", port, ErrInvalid)
	}
	rec, err := f.locks.resolve(ctx, caller, name)
	if err != nil {
		return nil, f.safeErr(err)
	}
	e := f.entry(caller, "box.forward", name)
	e.Detail = fmt.Sprintf("port %d", port)
	if err := forwardable(rec); err != nil {
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return nil, f.safeErr(err)
	}
	c, err := f.vm.Dial(ctx, rec.VM, agent.DialRequest{Host: "127.0.0.1", Port: port})
	if err != nil {
		err = dialErr(name, port, err)
		f.audit.Finish(ctx, e, err, audit.ResultError)
		return nil, f.safeErr(err)
	}
	if err := f.audit.Record(ctx, e); err != nil {
		c.Close()
		return nil, f.safeErr(err)
	}
	return c, nil
}

// forwardable says why a box's port cannot be reached in its state: as
// awake, but a sleeping box is told how to wake for its ports.
func forwardable(rec record) error {
	if rec.State == Sleeping {
		return fmt.Errorf("box %q is asleep: wake it first to reach its ports (ssh <gateway> wake %s, or the console's Wake button): %w",
			rec.Name, rec.Name, ErrConflict)
	}
	return awake(rec)
}

// dialErr maps a failed dial to the core's errors.
func dialErr(name string, port int, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("nothing listens on port %d in box %q: %w", port, name, ErrUnavailable)
	case errors.Is(err, agent.ErrDialAddr), errors.Is(err, fs.ErrInvalid):
		return fmt.Errorf("port %d of box %q: %w: %w", port, name, ErrInvalid, err)
	case errors.Is(err, vm.ErrState):
		return fmt.Errorf("box %q: its machine is not running: %w", name, ErrConflict)
	}
	return fmt.Errorf("forward port %d of box %q: %w", port, name, vmErr(err))
}
