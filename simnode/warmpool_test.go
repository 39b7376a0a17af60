package simnode

import (
	"context"
	"testing"
	"time"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/simnode/engine"
)

// A burst of starts grows the build's pool to the burst's size (capped), a
// quiet minute brings it back to the floor, and a build nobody starts for
// warmIdle gives its instances back.
func TestWarmPoolFollowsDemand(t *testing.T) {
	arena := mustModule(t)
	pong, err := testEng.Compile(context.Background(), builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	opts := engine.InstanceOptions{MemoryLimitPages: 512, CallDeadline: 100 * time.Millisecond}
	d := newWarmDemand(2, 5)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	if got := d.started(t0, arena, opts); got != 2 {
		t.Fatalf("first start: pool %d, want the floor 2", got)
	}
	// Four starts within one second: the pool follows the burst.
	for i := 1; i <= 3; i++ {
		d.started(t0.Add(time.Duration(i)*200*time.Millisecond), arena, opts)
	}
	if got := d.size(arena.BuildID); got != 4 {
		t.Fatalf("after 4 starts in a second: pool %d, want 4", got)
	}
	// Eight more in one second: capped at the ceiling.
	for i := range 8 {
		d.started(t0.Add(2*time.Second+time.Duration(i)*100*time.Millisecond), arena, opts)
	}
	if got := d.size(arena.BuildID); got != 5 {
		t.Fatalf("after a burst of 8: pool %d, want the ceiling 5", got)
	}
	// The pool really fills to that size.
	for end := time.Now().Add(60 * time.Second); arena.WarmReady(opts) < 5; {
		if time.Now().After(end) {
			t.Fatalf("warm instances ready: %d, want 5", arena.WarmReady(opts))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Starts spread out over the next minutes: the burst leaves the window
	// and the pool shrinks back to the floor.
	d.started(t0.Add(2*time.Minute), arena, opts)
	if got := d.size(arena.BuildID); got != 2 {
		t.Fatalf("a minute after the burst: pool %d, want 2", got)
	}
	// Another build starts after arena has been idle for warmIdle: arena's
	// pool is freed.
	d.started(t0.Add(2*time.Minute+warmIdle), pong, opts)
	if got := d.size(arena.BuildID); got != 0 {
		t.Fatalf("idle build: pool %d, want 0", got)
	}
	for end := time.Now().Add(10 * time.Second); arena.WarmReady(opts) > 0; {
		if time.Now().After(end) {
			t.Fatalf("idle build still holds %d warm instances", arena.WarmReady(opts))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := d.total(); got != 2 {
		t.Fatalf("total target %d, want pong's 2", got)
	}
	pong.Warm(0, opts)
}

// A negative floor (Config.WarmInstances < 0) disables warm pools.
func TestWarmPoolDisabled(t *testing.T) {
	arena := mustModule(t)
	d := newWarmDemand(-1, 16)
	if got := d.started(time.Now(), arena, engine.InstanceOptions{}); got != 0 || d.total() != 0 {
		t.Fatalf("disabled pools sized %d", got)
	}
}
