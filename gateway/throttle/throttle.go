// Package throttle holds the rules every front shares: the failed-auth
// throttle, the client address behind trusted proxies, and the per-user
// request rate limit. Everything is in memory and bounded.
package throttle

import (
	"net/netip"
	"sync"
	"time"
)

// The failed-auth defaults every front shares: 20 failures per client per 10
// minutes.
const (
	DefaultAttempts = 20
	DefaultWindow   = 10 * time.Minute
)

// MaxClients bounds how many clients (or users) a throttle tracks. When full,
// expired entries are swept; if that is not enough, the least recently
// active entry is dropped.
const MaxClients = 65536

// Auth refuses a client after too many failed authentications in a sliding
// window: it keeps the times of the client's last `attempts` failures, and the
// client may try again once the oldest of them is older than the window.
// Successes do not reset the count, so a user with one valid key cannot
// launder guesses at others.
type Auth struct {
	attempts int
	window   time.Duration
	now      func() time.Time
	max      int

	mu        sync.Mutex
	clients   map[string][]time.Time // failure times, oldest first, at most attempts
	lastSweep time.Time
}

// NewAuth allows attempts failures per client per window (the gateway uses 20
// per 10 minutes). A nil now means time.Now.
func NewAuth(attempts int, window time.Duration, now func() time.Time) *Auth {
	if now == nil {
		now = time.Now
	}
	if attempts < 1 {
		attempts = 1
	}
	return &Auth{attempts: attempts, window: window, now: now, max: MaxClients, clients: map[string][]time.Time{}}
}

// key groups an IPv6 client by its /64, which one host typically owns whole,
// and drops a port if the caller passed "ip:port" (else every connection
// would count as a new client); anything else is used as given.
func key(client string) string {
	if a, ok := parseIP(client); ok {
		if a.Is6() {
			p, _ := a.Prefix(64)
			return p.String()
		}
		return a.String()
	}
	return client
}

// live drops failures older than the window; callers hold mu.
func (a *Auth) live(k string, now time.Time) []time.Time {
	ts := a.clients[k]
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= a.window {
		i++
	}
	if i == len(ts) {
		delete(a.clients, k)
		return nil
	}
	if i > 0 {
		ts = append(ts[:0], ts[i:]...)
		a.clients[k] = ts
	}
	return ts
}

// Check says whether client may try to authenticate now, and if not, after how
// long it may. Call it before authenticating.
func (a *Auth) Check(client string) (retryAfter time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	ts := a.live(key(client), now)
	if len(ts) < a.attempts {
		return 0, true
	}
	return ts[0].Add(a.window).Sub(now), false
}

// Fail records a failed authentication by client.
func (a *Auth) Fail(client string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	k := key(client)
	ts := a.live(k, now)
	if ts == nil && len(a.clients) >= a.max {
		a.makeRoom(now)
	}
	ts = append(ts, now)
	if len(ts) > a.attempts {
		ts = append(ts[:0], ts[len(ts)-a.attempts:]...)
	}
	a.clients[k] = ts
}

// Tracked is how many clients have failures on record.
func (a *Auth) Tracked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.clients)
}

// makeRoom sweeps expired entries (at most once per window unless still
// full) and, if the map is still full, drops the client whose last failure is
// oldest. Callers hold mu.
func (a *Auth) makeRoom(now time.Time) {
	if now.Sub(a.lastSweep) >= a.window/10 {
		a.lastSweep = now
		for k := range a.clients {
			a.live(k, now)
		}
	}
	if len(a.clients) < a.max {
		return
	}
	var oldest string
	var oldestT time.Time
	for k, ts := range a.clients {
		if t := ts[len(ts)-1]; oldest == "" || t.Before(oldestT) {
			oldest, oldestT = k, t
		}
	}
	delete(a.clients, oldest)
}

// ClientAddr is the address the throttle keys on: the socket's IP, or, when
// the socket peer is inside a trusted proxy prefix, the address the proxies
// report in X-Forwarded-For. Walking the header from the right, trusted
// proxies are skipped and the first other hop is the client; with a single
// proxy that sets the header this is exactly its first hop, and a client
// cannot pick its own address by sending a forged X-Forwarded-For through a
// proxy that appends to it. Garbage in a hop that would be used falls back to
// the socket IP.
func ClientAddr(remoteAddr, xForwardedFor string, trusted []netip.Prefix) string {
	peer, ok := parseIP(remoteAddr)
	if !ok {
		return remoteAddr
	}
	if xForwardedFor == "" || !inAny(peer, trusted) {
		return peer.String()
	}
	hops := splitHops(xForwardedFor)
	if hops == nil {
		return peer.String()
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseIP(hops[i])
		if !ok {
			return peer.String()
		}
		if i == 0 || !inAny(hop, trusted) {
			return hop.String()
		}
	}
	return peer.String()
}

// maxHops bounds the X-Forwarded-For work per request.
const maxHops = 32

func splitHops(xff string) []string {
	var hops []string
	start := 0
	for i := 0; i <= len(xff); i++ {
		if i == len(xff) || xff[i] == ',' {
			hops = append(hops, trimSpace(xff[start:i]))
			start = i + 1
			if len(hops) > maxHops {
				return nil
			}
		}
	}
	return hops
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseIP accepts "ip", "ip:port" and "[ipv6]:port"; zones are refused.
func parseIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		a = ap.Addr()
	}
	if a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func inAny(a netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Rate is a per-user token bucket: perMinute tokens refilled continuously,
// burst of perMinute.
type Rate struct {
	perMinute int
	now       func() time.Time
	max       int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time // last refill
	used   time.Time // last Allow, for eviction
}

// NewRate allows perMinute requests per user per minute; perMinute <= 0 means
// no limit. A nil now means time.Now.
func NewRate(perMinute int, now func() time.Time) *Rate {
	if now == nil {
		now = time.Now
	}
	return &Rate{perMinute: perMinute, now: now, max: MaxClients, buckets: map[string]*bucket{}}
}

func (r *Rate) refill(b *bucket, now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens += el.Minutes() * float64(r.perMinute)
		if b.tokens > float64(r.perMinute) {
			b.tokens = float64(r.perMinute)
		}
		b.at = now
	}
}

// Allow takes one request from user's bucket; when empty it says how long
// until the next token.
func (r *Rate) Allow(user string) (retryAfter time.Duration, ok bool) {
	if r.perMinute <= 0 {
		return 0, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	b := r.buckets[user]
	if b == nil {
		if len(r.buckets) >= r.max {
			r.makeRoom(now)
		}
		b = &bucket{tokens: float64(r.perMinute), at: now}
		r.buckets[user] = b
	}
	r.refill(b, now)
	b.used = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	wait := time.Duration((1 - b.tokens) / float64(r.perMinute) * float64(time.Minute))
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait, false
}

// makeRoom drops full buckets (the same as no bucket) and, if still full, the
// least recently used one. Callers hold mu.
func (r *Rate) makeRoom(now time.Time) {
	var oldest string
	var oldestT time.Time
	for u, b := range r.buckets {
		r.refill(b, now)
		if b.tokens >= float64(r.perMinute) {
			delete(r.buckets, u)
			continue
		}
		if oldest == "" || b.used.Before(oldestT) {
			oldest, oldestT = u, b.used
		}
	}
	if len(r.buckets) >= r.max && oldest != "" {
		delete(r.buckets, oldest)
	}
}
