package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"ludus.dev/ludus/games/builtin"
)

// TestWarmPoolDeterministic: a warm instance and a cold one of the same match
// compute the same states; acquiring from a filled pool is fast.
func TestWarmPoolDeterministic(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	opts := InstanceOptions{MemoryLimitPages: 256}
	m.Warm(2, opts)
	for end := time.Now().Add(60 * time.Second); m.WarmReady(opts) < 2; {
		if time.Now().After(end) {
			t.Fatal("the pool did not fill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	run := func(warm bool) []uint64 {
		var inst *Instance
		if warm {
			var got bool
			inst, got, err = m.Acquire(ctx, 21, opts)
			if err == nil && !got {
				t.Fatal("Acquire did not use the warm pool")
			}
		} else {
			inst, err = m.InstantiateWith(ctx, 21, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		if err := inst.Init(ctx, 21, []byte(`{"bots":8}`)); err != nil {
			t.Fatal(err)
		}
		var hs []uint64
		for i := 0; i < 300; i++ {
			if _, err := inst.Step(ctx, nil); err != nil {
				t.Fatal(err)
			}
			h, _ := inst.StateHash(ctx)
			hs = append(hs, h)
		}
		return hs
	}
	if !equalU64(run(true), run(false)) {
		t.Fatal("a warm instance diverged from a cold one")
	}
	// A different options key has no pool: Acquire falls back to a cold instance.
	inst, warm, err := m.Acquire(ctx, 1, InstanceOptions{MemoryLimitPages: 300})
	if err != nil || warm {
		t.Fatalf("Acquire without a pool: warm=%v err=%v", warm, err)
	}
	inst.Close(ctx)
	m.Warm(0, opts)
}

// TestEvictIdle: a compiled module goes only when no instance of it is
// alive (warm ones included) and it was not used for the idle time; its
// pool's goroutine ends with it; an old pointer to it is refused; a new
// Compile brings it back.
func TestEvictIdle(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	m, err := e.Compile(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ids := e.EvictIdle(ctx, 0); len(ids) != 0 {
		t.Fatalf("evicted %v with an instance alive", ids)
	}
	inst.Close(ctx)
	inst.Close(ctx) // twice counts once
	if ids := e.EvictIdle(ctx, time.Hour); len(ids) != 0 {
		t.Fatalf("evicted %v used a moment ago", ids)
	}
	m.Warm(2, InstanceOptions{})
	deadline := time.Now().Add(10 * time.Second)
	for m.WarmReady(InstanceOptions{}) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not fill")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ids := e.EvictIdle(ctx, 0); len(ids) != 0 {
		t.Fatalf("evicted %v with warm instances", ids)
	}
	m.Warm(0, InstanceOptions{})
	for m.WarmReady(InstanceOptions{}) > 0 || m.live.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not drain: %d ready, %d live", m.WarmReady(InstanceOptions{}), m.live.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ids := e.EvictIdle(ctx, 0); len(ids) != 1 || ids[0] != m.BuildID {
		t.Fatalf("evicted %v, want the idle module", ids)
	}
	if _, ok := e.Module(m.BuildID); ok {
		t.Fatal("an evicted module is still looked up")
	}
	if _, err := m.Instantiate(ctx, 1); !errors.Is(err, errEvicted) {
		t.Fatalf("instantiating an evicted module: %v", err)
	}
	m.Warm(1, InstanceOptions{}) // no pool comes back
	if m.WarmReady(InstanceOptions{}) != 0 {
		t.Fatal("an evicted module warmed instances")
	}
	again, err := e.Compile(ctx, builtin.Pong)
	if err != nil || again == m {
		t.Fatalf("compile after eviction: %v (same module: %v)", err, again == m)
	}
	inst, err = again.Instantiate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	// The evicted pool's goroutine has ended: Close does not wait for it.
	done := make(chan struct{})
	go func() { e.Close(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Engine.Close waited on an evicted module's pool")
	}
}
