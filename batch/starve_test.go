package batch

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// TestStarvedGameIsGivenBack: a game on a node whose live matches keep it
// waiting is given back to the queue once it has waited MaxPause, its
// attempt taken back, and the worker claims nothing more while the node is
// busy. Held on, it ran past the reaper's item timeout, which ended its
// claim as a lost attempt, and a game on a busy node was recorded as failed
// after three; here the reaper's timeout is short, so a game still held at
// the end of the busy spell had been expired by then.
func TestStarvedGameIsGivenBack(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, _ := newTenant(t)
	var late atomic.Bool
	late.Store(true) // busy from the start: the game pauses after its first chunk
	var asked atomic.Int64
	live := func() bool { asked.Add(1); return late.Load() }
	startWorker(t, WorkerConfig{ID: "starved", Concurrency: 1, LiveLate: live, MaxPause: 300 * time.Millisecond,
		Reaper: ReaperConfig{Every: 100 * time.Millisecond, ItemTimeout: 2 * time.Second}})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	run, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 1, Maps: []Map{{Config: json.RawMessage(longArena)}}, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Claimed, then given back: no lease, no attempt counted.
	claimed := false
	for {
		ls, err := state.BatchLeases(ctx, tenant, run.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := firstOf(ls, "starved"); ok {
			claimed = true
		} else if claimed {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the game was never given back (claimed: %v)", claimed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Busy for longer than the reaper's item timeout: nothing is claimed.
	time.Sleep(3 * time.Second)
	if ls, err := state.BatchLeases(ctx, tenant, run.ID); err != nil || len(ls) != 0 {
		t.Fatalf("claimed again while the node is busy: %v %v", ls, err)
	}
	resp, err := state.Raw().Get(ctx, clusterstate.BatchAttemptsKey(tenant, run.ID, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("attempts of the given-back game: %s, want none counted", resp.Kvs[0].Value)
	}
	late.Store(false)
	r := waitEnded(t, ctx, tenant, run.ID)
	if r.Reason != clusterstate.BatchComplete || r.Final.Done != 1 || r.Final.Failed != 0 {
		t.Fatalf("run ended %s with %+v; want the game played", r.Reason, r.Final)
	}
}
