package gateway

import (
	"time"

	"ludus.dev/ludus/internal/clock"
)

// Clock is the time source of the gateway's stream and routing path: the
// re-attach budget and backoff, the upstream silence watchdog, and the
// retry budget of unary calls to a moving game all read it. Tests inject a
// clock they drive; tests in a testing/synctest bubble may keep the system
// clock, whose time the bubble already fakes.
type Clock = clock.Clock

// Timer is a one-shot timer of a Clock.
type Timer = clock.Timer

// systemClock is the time package's clock.
type systemClock = clock.System

// sleep waits d on clk, or until done is closed (it reports false then).
func sleep(clk Clock, d time.Duration, done <-chan struct{}) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C():
		return true
	}
}
