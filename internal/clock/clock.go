// Package clock is the time source the gateway's stream path and the sim
// node's tick schedule read, so tests can drive time instead of sleeping.
// Production code uses System; tests inject a clock they advance, or keep
// System inside a testing/synctest bubble, whose time the bubble fakes.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once d from now (Clock.Now).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock; its methods are those of *time.Timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// System is the time package's clock.
type System struct{}

// Now implements Clock.
func (System) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
