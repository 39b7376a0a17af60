package clock

import (
	"sync"
	"time"
)

// TestingT is the part of *testing.T that Fake.Drive uses (this package does
// not import testing: the binary must not link it).
type TestingT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Fake is a Clock that moves only when a test advances it: for tests whose
// code under test also waits on the network (etcd, loopback sockets), which
// cannot live in a testing/synctest bubble (a goroutine waiting on the network
// is never durably blocked, so the bubble's time would never move).
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{} // armed
}

// NewFake returns a Fake clock at 2026-01-01 00:00 UTC.
func NewFake() *Fake {
	return &Fake{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*fakeTimer]struct{}{}}
}

var _ Clock = (*Fake)(nil)

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock by d and fires the timers due by then.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.fireLocked()
		}
	}
}

// Armed is how many timers wait to fire.
func (c *Fake) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Drive advances the clock by step every real millisecond until cond holds,
// for at most 5 s of real time: for waits whose exact schedule the test does
// not check (backoffs).
func (c *Fake) Drive(t TestingT, step time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out driving the clock until %s", what)
		}
		c.Advance(step)
		time.Sleep(time.Millisecond)
	}
}

// fakeTimer behaves as a *time.Timer since Go 1.23: after Stop or Reset no
// stale time is received.
type fakeTimer struct {
	c  *Fake
	ch chan time.Time
	at time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	t.drainLocked()
	return armed
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	t.drainLocked()
	t.at = t.c.now.Add(d)
	t.c.timers[t] = struct{}{}
	if d <= 0 {
		t.fireLocked()
	}
	return armed
}

func (t *fakeTimer) fireLocked() {
	delete(t.c.timers, t)
	select {
	case t.ch <- t.c.now:
	default:
	}
}

func (t *fakeTimer) drainLocked() {
	select {
	case <-t.ch:
	default:
	}
}
