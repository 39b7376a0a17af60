package batch

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// A run that ends — canceled, or past its deadline — stops the games of it
// that workers are playing, at once rather than at their end, and the CPU
// those games took is charged to the run: its final CPU, the backend's
// record of it and the tenant's settled spend count it, though no game of
// it was acknowledged.
func TestEndedRunStopsGamesInFlight(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	tenant, key := newTenant(t)
	cli := service(t)
	// The runner asks LiveLate after every chunk of 35 ticks and pauses
	// while it answers true, asking again every 50 ms at most: held after
	// their first chunk, the games stay in flight, and the asking stops once
	// they stop.
	var asked atomic.Int64
	live := func() bool { asked.Add(1); return true }
	_, stop := startWorker(t, WorkerConfig{ID: "stopper", Concurrency: 2, NoReaper: true, LiveLate: live})
	adm := &Admitter{Etcd: state, Backend: srv, Engine: eng}
	long := []Map{{Config: json.RawMessage(longArena)}}

	// inFlight waits until the worker plays two games of run (both held).
	inFlight := func(run string) {
		t.Helper()
		for {
			ls, err := state.BatchLeases(ctx, tenant, run)
			if err != nil {
				t.Fatal(err)
			}
			if len(ls) == 2 && asked.Load() > 0 {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("the worker holds %d games of run %s", len(ls), run)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// stopped waits until no held game is left: nothing asks for 300 ms.
	stopped := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for last := asked.Load(); ; {
			time.Sleep(300 * time.Millisecond)
			now := asked.Load()
			if now == last {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: its games are still being played 5 s later", what)
			}
			last = now
		}
	}
	canceled, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 4, Maps: long, Budget: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	inFlight(canceled.ID)
	if _, err := cli.CancelRun(ctx, withKey(&ludusv1.CancelRunRequest{RunId: canceled.ID}, key)); err != nil {
		t.Fatal(err)
	}
	stopped("canceled")

	late, err := adm.Admit(ctx, tenant, Spec{Module: "arena", Games: 4, Maps: long, Budget: time.Hour, Deadline: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inFlight(late.ID)
	if r := waitEnded(t, ctx, tenant, late.ID); r.Reason != clusterstate.BatchDeadline {
		t.Fatalf("run ended %s", r.Reason)
	}
	stopped("past its deadline")

	// Stopped, the worker has charged every game it stopped.
	stop()
	var cpu int64
	for _, run := range []string{canceled.ID, late.ID} {
		r, err := state.BatchRun(ctx, tenant, run)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := srv.BatchRun(ctx, tenant, run)
		if err != nil {
			t.Fatal(err)
		}
		if r.Final.CPU <= 0 || r.Final.Done != 0 || !r.Recorded || rec.CPUNanos != r.Final.CPU {
			t.Errorf("run %s (%s): CPU %d, %d games acknowledged, recorded %v with CPU %d; want the CPU of its stopped games, recorded",
				run, r.Reason, r.Final.CPU, r.Final.Done, r.Recorded, rec.CPUNanos)
		}
		cpu += r.Final.CPU
		if rs, _ := allResults(ctx, srv, tenant, run, false); len(rs) != 0 {
			t.Errorf("run %s took %d results after it ended", run, len(rs))
		}
	}
	ledger, err := state.BatchLedger(ctx, tenant)
	if err != nil || ledger.Settled != cpu {
		t.Fatalf("settled %d %v; want the runs' %d", ledger.Settled, err, cpu)
	}
}
