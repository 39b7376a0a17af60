package clock

import (
	"testing"
	"time"
)

func TestFakeFiresOnlyWhenAdvanced(t *testing.T) {
	c := NewFake()
	start := c.Now()
	tm := c.NewTimer(time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("fired before its time")
	default:
	}
	c.Advance(time.Millisecond)
	select {
	case at := <-tm.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v, want start+1s", at.Sub(start))
		}
	default:
		t.Fatal("did not fire at its time")
	}
	// Reset re-arms; Stop disarms and reports whether it was armed.
	tm.Reset(time.Second)
	if c.Armed() != 1 || !tm.Stop() || c.Armed() != 0 || tm.Stop() {
		t.Fatal("Reset/Stop do not arm and disarm")
	}
	c.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	// A timer reset to zero fires at once.
	tm.Reset(0)
	select {
	case <-tm.C():
	default:
		t.Fatal("Reset(0) did not fire")
	}
}

func TestSystemTimer(t *testing.T) {
	tm := System{}.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the system timer did not fire")
	}
}
