package fleet

import (
	"context"

	"sbx.dev/sbx/keys"
)

// The notification channels' part of the core's surface (api.go's rules
// hold: the caller first, every change an audit row, errors redacted).
// Each user manages their own channels; nobody sees another's.

// AddChannel checks and saves one of the caller's notification channels:
// a name like an account's, kind webhook, ntfy or slack, an http(s) URL the
// address policy admits (public, or a private one the operator trusts),
// the events it wants (nil: all), the daily digest opt-in, and a secret
// sealed with the URL. A webhook without a secret gets one, returned this
// once.
func (f *Fleet) AddChannel(ctx context.Context, caller keys.Actor, req ChannelRequest) (AddedChannel, error) {
	if err := need(caller, keys.RightWrite, "notify add"); err != nil {
		return AddedChannel{}, err
	}
	return f.notify.addChannel(ctx, caller, req)
}

// Channels lists the caller's notification channels (never a secret).
func (f *Fleet) Channels(ctx context.Context, caller keys.Actor) ([]Channel, error) {
	if err := need(caller, keys.RightRead, "notify ls"); err != nil {
		return nil, err
	}
	return f.notify.channels(ctx, caller)
}

// RemoveChannel deletes one of the caller's channels and its delivery log.
func (f *Fleet) RemoveChannel(ctx context.Context, caller keys.Actor, name string) error {
	if err := need(caller, keys.RightWrite, "notify rm"); err != nil {
		return err
	}
	return f.notify.removeChannel(ctx, caller, name)
}

// SetChannelEnabled turns one of the caller's channels on or off; a
// disabled channel gets nothing (its pending deliveries are given up).
func (f *Fleet) SetChannelEnabled(ctx context.Context, caller keys.Actor, name string, enabled bool) (Channel, error) {
	if err := need(caller, keys.RightWrite, "notify enable"); err != nil {
		return Channel{}, err
	}
	return f.notify.setEnabled(ctx, caller, name, enabled)
}

// TestChannel sends a test notification at once and reports the
// receiver's answer; not delivered is ErrUnavailable (with the Delivery).
func (f *Fleet) TestChannel(ctx context.Context, caller keys.Actor, name string) (Delivery, error) {
	if err := need(caller, keys.RightWrite, "notify test"); err != nil {
		return Delivery{}, err
	}
	return f.notify.testChannel(ctx, caller, name)
}

// Deliveries is one of the caller's channels' delivery log, newest first
// (limit <= 0: all that is kept, the last 100 finished and every pending).
func (f *Fleet) Deliveries(ctx context.Context, caller keys.Actor, name string, limit int) ([]Delivery, error) {
	if err := need(caller, keys.RightRead, "notify log"); err != nil {
		return nil, err
	}
	return f.notify.deliveries(ctx, caller, name, limit)
}
