package gateway

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"ludus.dev/ludus/internal/clock"
)

// fakeClock is clock.Fake: a Clock that moves only when a test advances it.
// The fake-cluster tests use it: etcd and loopback sockets cannot live in a
// synctest bubble (a goroutine waiting on the network is never durably
// blocked, so the bubble's time would never move), but the gateway's timers
// can be driven from outside.
type fakeClock = clock.Fake

func newFakeClock() *fakeClock { return clock.NewFake() }

var _ Clock = (*fakeClock)(nil)

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
