package testutil

import (
	"sync"
	"time"
)

// Clock is a clock that tests move by hand.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock is a Clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
