package gateway

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a Clock that moves only when a test advances it. Tests that
// run the fake cluster use it: etcd and loopback sockets cannot live in a
// synctest bubble (a goroutine waiting on the network is never durably
// blocked, so the bubble's time would never move), but the gateway's timers
// can be driven from outside.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{} // armed
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[*fakeTimer]struct{}{}}
}

var _ Clock = (*fakeClock)(nil)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock by d and fires the timers due by then.
func (c *fakeClock) Advance(d time.Duration) {
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
func (c *fakeClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Drive advances the clock by step every real millisecond until cond holds,
// for at most 5 s of real time: for waits whose exact schedule the test does
// not check (backoffs).
func (c *fakeClock) Drive(t *testing.T, step time.Duration, what string, cond func() bool) {
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
	c  *fakeClock
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

// The silence watchdog gives up on an upstream exactly upstreamSilence after
// its last message, and never while messages arrive. In a synctest bubble on
// the system clock: the bubble's time is virtual, so 13 s pass at once.
func TestWatchSilenceGivesUpAfterSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gaveUp := make(chan time.Time, 1)
		start := time.Now()
		alive := watchSilence(ctx, systemClock{}, upstreamSilence, func() { gaveUp <- time.Now() })
		// A message every 2.9 s for 10 s: never silent for 3 s.
		for time.Since(start) < 10*time.Second {
			time.Sleep(upstreamSilence - 100*time.Millisecond)
			alive()
			synctest.Wait()
			select {
			case at := <-gaveUp:
				t.Fatalf("gave up %v after the start while messages arrived", at.Sub(start))
			default:
			}
		}
		last := time.Now()
		if took := (<-gaveUp).Sub(last); took != upstreamSilence {
			t.Fatalf("gave up %v after the last message; want %v", took, upstreamSilence)
		}
	})
}

// A watchdog whose upstream ended (its context) stops without giving up.
func TestWatchSilenceStopsWithItsStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := false
		watchSilence(ctx, systemClock{}, upstreamSilence, func() { gaveUp = true })
		time.Sleep(time.Second)
		cancel()
		time.Sleep(time.Minute)
		synctest.Wait()
		if gaveUp {
			t.Fatal("gave up on an upstream that had ended")
		}
	})
}

// The fake clock keeps *time.Timer's contract, which the gateway's loops rely
// on: Reset re-arms from now, a stopped timer never fires, a fired timer
// delivers once.
func TestFakeClockTimers(t *testing.T) {
	c := newFakeClock()
	tm := c.NewTimer(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	if !tm.Reset(time.Second) {
		t.Fatal("Reset of an armed timer reported it stopped")
	}
	c.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("Reset did not re-arm from now")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-tm.C(); !got.Equal(c.Now()) {
		t.Fatalf("fired at %v; now %v", got, c.Now())
	}
	s := c.NewTimer(time.Second)
	if !s.Stop() || s.Stop() {
		t.Fatal("Stop: want true then false")
	}
	c.Advance(time.Hour)
	select {
	case <-s.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if n := c.Armed(); n != 0 {
		t.Fatalf("%d timers armed", n)
	}
}
