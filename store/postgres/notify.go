package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxPayload is PostgreSQL's NOTIFY payload limit (bytes, less than 8000).
const MaxPayload = 7999

// Notify sends payload on channel to every Listen on it, in any gateway,
// once the current transaction (here: the statement) commits.
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("notify %q: payload of %d bytes is over %d", channel, len(payload), MaxPayload)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		return fmt.Errorf("notify %q: %w", channel, err)
	}
	return nil
}

// Listen returns the payloads sent on channel until ctx ends, then closes
// the channel. It holds one connection of the pool. When that connection
// breaks it reconnects (after 1 s); notifications sent in between are lost,
// so a consumer treats a payload as a hint and reads the state it names.
// The returned channel has room for 256 payloads; past that, Listen blocks
// the connection's reader (PostgreSQL queues the rest server-side).
func (s *Store) Listen(ctx context.Context, channel string) (<-chan string, error) {
	conn, err := s.listen(ctx, channel)
	if err != nil {
		return nil, err
	}
	out := make(chan string, 256)
	go func() {
		defer close(out)
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err == nil {
				select {
				case out <- n.Payload:
				case <-ctx.Done():
				}
				continue
			}
			// pgx closes a connection whose wait was cancelled; one still
			// open goes back to the pool without its LISTEN.
			if c := conn.Conn(); !c.IsClosed() {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if _, uerr := c.Exec(uctx, "UNLISTEN *"); uerr != nil {
					c.Close(uctx)
				}
				cancel()
			}
			conn.Release()
			if ctx.Err() != nil {
				return
			}
			slog.Warn("postgres listen: connection lost, reconnecting", "channel", channel, "err", err)
			for {
				t := time.NewTimer(time.Second)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				if conn, err = s.listen(ctx, channel); err == nil {
					break
				}
			}
		}
	}()
	return out, nil
}

func (s *Store) listen(ctx context.Context, channel string) (interface {
	Conn() *pgx.Conn
	Release()
}, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen %q: %w", channel, err)
	}
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		c.Release()
		return nil, fmt.Errorf("listen %q: %w", channel, err)
	}
	return c, nil
}
