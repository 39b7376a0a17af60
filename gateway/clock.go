package gateway

import "time"

// Clock is the time source of the gateway's stream and routing path: the
// re-attach budget and backoff, the upstream silence watchdog, and the
// retry budget of unary calls to a moving game all read it. Tests inject a
// clock they drive; tests in a testing/synctest bubble may keep the system
// clock, whose time the bubble already fakes.
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

// systemClock is the time package's clock.
type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

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
