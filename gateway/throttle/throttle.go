// Package throttle holds the rules every front shares: the failed-auth
// throttle, the client address behind trusted proxies, and the per-user
// request rate limit.
package throttle

import (
	"net/netip"
	"time"
)

// Auth refuses a client after too many failed authentications in a window.
type Auth struct{}

// NewAuth allows attempts failures per client per window.
func NewAuth(attempts int, window time.Duration, now func() time.Time) *Auth { return &Auth{} }

// Check says whether client may try to authenticate now, and if not, after how
// long it may.
func (a *Auth) Check(client string) (retryAfter time.Duration, ok bool) { return 0, true }

// Fail records a failed authentication by client.
func (a *Auth) Fail(client string) {}

// ClientAddr is the address the throttle keys on.
func ClientAddr(remoteAddr, xForwardedFor string, trusted []netip.Prefix) string { return remoteAddr }

// Rate is a per-user token bucket.
type Rate struct{}

// NewRate allows perMinute requests per user per minute.
func NewRate(perMinute int, now func() time.Time) *Rate { return &Rate{} }

// Allow takes one request from user's bucket.
func (r *Rate) Allow(user string) (retryAfter time.Duration, ok bool) { return 0, true }
