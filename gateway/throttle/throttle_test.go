package throttle

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func TestAuthRefusesAttempt21AndRecoversAfterWindow(t *testing.T) {
	c := newClock()
	a := NewAuth(DefaultAttempts, DefaultWindow, c.now)
	for i := 1; i <= 20; i++ {
		if _, ok := a.Check("203.0.113.7"); !ok {
			t.Fatalf("attempt %d refused, want allowed", i)
		}
		a.Fail("203.0.113.7")
		c.add(time.Second)
	}
	retry, ok := a.Check("203.0.113.7")
	if ok {
		t.Fatal("attempt 21 allowed, want refused")
	}
	// The first failure was 20 s ago; it leaves the window in 10 min - 20 s.
	if want := 10*time.Minute - 20*time.Second; retry != want {
		t.Errorf("retryAfter = %v, want %v", retry, want)
	}
	if _, ok := a.Check("203.0.113.8"); !ok {
		t.Error("another client refused")
	}
	c.add(retry - time.Nanosecond)
	if _, ok := a.Check("203.0.113.7"); ok {
		t.Error("allowed just before the window passed")
	}
	c.add(time.Nanosecond)
	if _, ok := a.Check("203.0.113.7"); !ok {
		t.Error("still refused once the oldest failure left the window")
	}
	// Sliding: only one slot freed, so one more failure refuses again.
	a.Fail("203.0.113.7")
	if _, ok := a.Check("203.0.113.7"); ok {
		t.Error("allowed after refilling the window")
	}
	c.add(10 * time.Minute)
	if _, ok := a.Check("203.0.113.7"); !ok {
		t.Error("refused after a whole quiet window")
	}
	if n := a.Tracked(); n != 0 {
		t.Errorf("tracked %d clients after every failure expired, want 0", n)
	}
}

func TestAuthGroupsIPv6By64(t *testing.T) {
	c := newClock()
	a := NewAuth(3, time.Minute, c.now)
	for i := range 3 {
		a.Fail(fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	if _, ok := a.Check("2001:db8:1:2:ffff::1"); ok {
		t.Error("same /64 allowed after 3 failures from it")
	}
	if _, ok := a.Check("2001:db8:1:3::1"); !ok {
		t.Error("another /64 refused")
	}
	a.Fail("::ffff:192.0.2.1")
	a.Fail("192.0.2.1")
	a.Fail("192.0.2.1")
	if _, ok := a.Check("192.0.2.1"); ok {
		t.Error("IPv4-mapped and plain IPv4 counted apart")
	}
}

func TestAuthMemoryBounded(t *testing.T) {
	c := newClock()
	a := NewAuth(20, 10*time.Minute, c.now)
	a.max = 100
	for i := range 1000 {
		a.Fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		c.add(time.Millisecond)
	}
	if n := a.Tracked(); n > 100 {
		t.Fatalf("tracking %d clients, cap is 100", n)
	}
	// A client at its limit is kept over idle ones when room is made.
	for range 20 {
		a.Fail("198.51.100.1")
	}
	for i := range 99 {
		a.Fail(fmt.Sprintf("10.1.%d.%d", i/256, i%256))
	}
	if _, ok := a.Check("198.51.100.1"); ok {
		t.Error("blocked client forgotten while the oldest idle ones should have gone first")
	}
	// Expired entries are swept when the map is full.
	c.add(11 * time.Minute)
	a.Fail("198.51.100.2")
	if n := a.Tracked(); n != 1 {
		t.Errorf("tracked %d after everything expired, want 1", n)
	}
}

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	tests := []struct {
		name, remote, xff, want string
	}{
		{"socket v4", "192.0.2.1:5555", "", "192.0.2.1"},
		{"socket v6", "[2001:db8::1]:5555", "", "2001:db8::1"},
		{"socket mapped", "[::ffff:192.0.2.1]:5555", "", "192.0.2.1"},
		{"socket without port", "192.0.2.1", "", "192.0.2.1"},
		{"untrusted peer ignores xff", "192.0.2.1:5555", "198.51.100.9", "192.0.2.1"},
		{"trusted peer uses xff", "10.1.2.3:443", "198.51.100.9", "198.51.100.9"},
		{"trusted peer xff spaces", "10.1.2.3:443", "  198.51.100.9 ", "198.51.100.9"},
		{"trusted peer xff v6", "[fd00::1]:443", "2001:db8::5", "2001:db8::5"},
		{"trusted peer xff with port", "10.1.2.3:443", "198.51.100.9:1234", "198.51.100.9"},
		{"first hop behind trusted chain", "10.1.2.3:443", "198.51.100.9, 10.9.9.9", "198.51.100.9"},
		{"forged hop left of real client", "10.1.2.3:443", "1.2.3.4, 198.51.100.9", "198.51.100.9"},
		{"garbage xff", "10.1.2.3:443", "not-an-ip", "10.1.2.3"},
		{"garbage hop", "10.1.2.3:443", "198.51.100.9, bogus", "10.1.2.3"},
		{"empty hop", "10.1.2.3:443", ",", "10.1.2.3"},
		{"zone refused", "10.1.2.3:443", "fe80::1%eth0", "10.1.2.3"},
		{"all hops trusted", "10.1.2.3:443", "10.4.4.4, 10.5.5.5", "10.4.4.4"},
		{"too many hops", "10.1.2.3:443", strings.Repeat("10.0.0.1,", 40) + "198.51.100.9", "10.1.2.3"},
		{"unparsable socket", "pipe", "198.51.100.9", "pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClientAddr(tt.remote, tt.xff, trusted); got != tt.want {
				t.Errorf("ClientAddr(%q, %q) = %q, want %q", tt.remote, tt.xff, got, tt.want)
			}
		})
	}
	if got := ClientAddr("10.1.2.3:443", "198.51.100.9", nil); got != "10.1.2.3" {
		t.Errorf("no trusted proxies: got %q, want the socket IP", got)
	}
}

func FuzzClientAddr(f *testing.F) {
	f.Add("10.1.2.3:443", "198.51.100.9")
	f.Add("192.0.2.1:1", "")
	f.Add("[fd00::1]:443", "2001:db8::5, fd00::2")
	f.Add("10.0.0.1:1", ",,,")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, remote, xff string) {
		got := ClientAddr(remote, xff, trusted)
		peer, ok := parseIP(remote)
		if !ok {
			if got != remote {
				t.Fatalf("unparsable socket %q: got %q", remote, got)
			}
			return
		}
		a, err := netip.ParseAddr(got)
		if err != nil {
			t.Fatalf("ClientAddr(%q, %q) = %q, not an IP", remote, xff, got)
		}
		if !inAny(peer, trusted) && a != peer {
			t.Fatalf("untrusted peer %v: got %v from XFF %q", peer, a, xff)
		}
		if a == peer {
			return
		}
		// Anything but the peer must be one of the header's hops.
		for _, h := range strings.Split(xff, ",") {
			if ha, ok := parseIP(strings.Trim(h, " \t")); ok && ha == a {
				return
			}
		}
		t.Fatalf("ClientAddr(%q, %q) = %v, neither the peer nor a hop", remote, xff, a)
	})
}

func TestRate(t *testing.T) {
	c := newClock()
	r := NewRate(60, c.now)
	for i := range 60 {
		if _, ok := r.Allow("alice"); !ok {
			t.Fatalf("request %d refused within the burst", i+1)
		}
	}
	retry, ok := r.Allow("alice")
	if ok {
		t.Fatal("request 61 allowed")
	}
	if retry != time.Second {
		t.Errorf("retryAfter = %v, want 1s (60/min)", retry)
	}
	if _, ok := r.Allow("bob"); !ok {
		t.Error("bob refused because of alice")
	}
	c.add(time.Second)
	if _, ok := r.Allow("alice"); !ok {
		t.Error("refused after one token refilled")
	}
	if _, ok := r.Allow("alice"); ok {
		t.Error("two requests allowed after one token refilled")
	}
	c.add(time.Hour)
	for i := range 60 {
		if _, ok := r.Allow("alice"); !ok {
			t.Fatalf("request %d refused after an idle hour", i+1)
		}
	}
	if _, ok := NewRate(0, c.now).Allow("x"); !ok {
		t.Error("perMinute 0 should mean unlimited")
	}
}

func TestRateMemoryBounded(t *testing.T) {
	c := newClock()
	r := NewRate(10, c.now)
	r.max = 50
	for i := range 500 {
		r.Allow(fmt.Sprintf("user%d", i))
		c.add(time.Millisecond)
	}
	if n := len(r.buckets); n > 50 {
		t.Fatalf("%d buckets, cap 50", n)
	}
}

func BenchmarkAuthCheckFail(b *testing.B) {
	a := NewAuth(20, 10*time.Minute, nil)
	for i := 0; b.Loop(); i++ {
		c := fmt.Sprintf("10.0.%d.%d", i/256%256, i%256)
		a.Check(c)
		a.Fail(c)
	}
}

// A caller passing "ip:port" must not turn every connection into a new
// client.
func TestAuthIgnoresPort(t *testing.T) {
	c := newClock()
	a := NewAuth(2, time.Minute, c.now)
	a.Fail("192.0.2.1:1000")
	a.Fail("192.0.2.1:1001")
	if _, ok := a.Check("192.0.2.1:1002"); ok {
		t.Error("ports counted as different clients")
	}
	if _, ok := a.Check("192.0.2.1"); ok {
		t.Error("ip:port and ip counted apart")
	}
}
