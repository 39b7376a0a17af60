package backend_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
)

// TestBatchRunBytes: past its run's byte bound a game's result is stored
// without its log, then without its result too, its error text saying
// what was not kept; every game still has its record.
func TestBatchRunBytes(t *testing.T) {
	e := newEnv(t, func(c *backend.Config) { c.BatchRunBytes = 3000 })
	ctx := context.Background()
	tn, _ := e.createTenant("runbytes")
	now := time.Now()
	if err := e.srv.PutBatchRun(ctx, store.BatchRun{TenantID: tn.Id, RunID: "r1", State: "running", Games: 4, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	put := func(game int) {
		t.Helper()
		r := store.BatchResult{TenantID: tn.Id, RunID: "r1", Game: game, Map: "m", Winner: -1,
			Result: bytes.Repeat([]byte{'1'}, 600), Log: bytes.Repeat([]byte{'l'}, 1000)}
		if ok, err := e.srv.PutBatchResult(ctx, r); err != nil || !ok {
			t.Fatalf("game %d: %v %v", game, ok, err)
		}
	}
	for g := range 4 {
		put(g)
	}
	rs, _, err := e.srv.BatchResults(ctx, tn.Id, "r1", store.BatchResultQuery{Limit: 10, WithLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("%d results, want 4", len(rs))
	}
	// 1600 bytes each: game 0 whole; game 1 without its log (600 more: 2200);
	// game 2 without its log too (2800); game 3 without either.
	want := []struct{ result, log int }{{600, 1000}, {600, 0}, {600, 0}, {0, 0}}
	for i, r := range rs {
		if len(r.Result) != want[i].result || len(r.Log) != want[i].log {
			t.Errorf("game %d: result %d bytes, log %d; want %d and %d", r.Game, len(r.Result), len(r.Log), want[i].result, want[i].log)
		}
		switch {
		case want[i].log == 1000 && r.Error != "":
			t.Errorf("game %d kept whole has error %q", r.Game, r.Error)
		case want[i].log == 0 && want[i].result > 0 && !strings.Contains(r.Error, "log not kept"):
			t.Errorf("game %d: error %q does not say its log was not kept", r.Game, r.Error)
		case want[i].result == 0 && !strings.Contains(r.Error, "result not kept"):
			t.Errorf("game %d: error %q does not say its result was not kept", r.Game, r.Error)
		}
	}
}
