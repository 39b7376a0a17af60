package simnode

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"ludus.dev/ludus/internal/clock"
)

// TestLiveLateness: a tick later than the threshold makes the node's live
// matches late for the hold that follows it, on the node's clock; ticks on
// time, and late ticks observed before the watch began, do not.
func TestLiveLateness(t *testing.T) {
	clk := clock.NewFake()
	n, err := New(Config{ID: "late-1", Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{},
		Clock: clk, ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.cancel() // never started: only its scheduler goroutine runs
	tick := func(late time.Duration) { n.metrics.lateness.Observe(late.Seconds()) }

	tick(50 * time.Millisecond) // before the watch: not counted
	l := n.LiveLateness(2500*time.Microsecond, 100*time.Millisecond)
	if l.Threshold() != 2*time.Millisecond {
		t.Fatalf("threshold %v, want 2.5 ms rounded down to the 2 ms bucket bound", l.Threshold())
	}
	if l.Late() {
		t.Fatal("late before any tick of the watch")
	}
	clk.Advance(2 * time.Millisecond)
	tick(1500 * time.Microsecond)
	tick(2 * time.Millisecond) // at the threshold: on time
	if l.Late() {
		t.Fatal("late after ticks within the threshold")
	}
	clk.Advance(2 * time.Millisecond)
	tick(2100 * time.Microsecond)
	if !l.Late() {
		t.Fatal("not late after a tick 2.1 ms late")
	}
	// Within the sampling interval the answer stands without a read.
	clk.Advance(500 * time.Microsecond)
	if !l.Late() {
		t.Fatal("not late 0.5 ms after a late tick")
	}
	clk.Advance(99 * time.Millisecond)
	if !l.Late() {
		t.Fatal("not late 99.5 ms after a late tick (hold 100 ms)")
	}
	clk.Advance(time.Millisecond)
	if l.Late() {
		t.Fatal("still late once the hold passed with no late tick")
	}
	// Another late tick holds the node late again.
	tick(30 * time.Millisecond)
	clk.Advance(2 * time.Millisecond)
	if !l.Late() {
		t.Fatal("not late after a second late tick")
	}
	clk.Advance(101 * time.Millisecond)
	tick(time.Millisecond)
	if l.Late() {
		t.Fatal("late after the hold, with only a tick on time since")
	}

	// The defaults.
	if d := n.LiveLateness(0, 0); d.Threshold() != DefaultLiveLateThreshold || d.hold != DefaultLiveLateHold {
		t.Fatalf("defaults: threshold %v hold %v", d.Threshold(), d.hold)
	}
}
