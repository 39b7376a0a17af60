package engine

import (
	"context"
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
