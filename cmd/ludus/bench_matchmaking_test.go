package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"ludus.dev/ludus/internal/gcpolicy"
	"ludus.dev/ludus/ops/etcdserver"
)

// TestBenchMatchmakingSmall runs `ludus bench matchmaking` at a small scale:
// both phases, the kill and a saturation search over fresh rigs. Its JSON
// field names are an interface other tools read, and its correctness
// figures must hold at any scale.
func TestBenchMatchmakingSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several embedded etcd servers")
	}
	t.Cleanup(gcpolicy.Save())
	t.Setenv("GOGC", "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// What the bench says as it runs (how streams ended), shown when the
	// test fails.
	var said bytes.Buffer
	progress := &syncWriter{w: &said}
	t.Cleanup(func() {
		if t.Failed() {
			progress.mu.Lock()
			defer progress.mu.Unlock()
			t.Logf("the bench said:\n%s", said.String())
		}
	})
	res, err := benchMatchmaking(ctx, progress, mmFlags{
		rate: 100, duration: 2 * time.Second, drain: 5 * time.Second, ttl: 2 * time.Second,
		retention: etcdserver.DefaultCompactionRetention, replicas: 2, kill: true,
		saturate: true, satFrom: 100, satMax: 160, satStep: time.Second, satVerify: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"tickets_per_sec", "time_to_match_ms_p50", "time_to_match_ms_p99", "rating_spread_p99",
		"parties_split", "tickets_lost", "tickets_matched_twice", "allocate_ms_p50", "allocate_ms_p99",
		"saturation_cpu_ms_per_ticket", "saturation_etcd_db_bytes", "gc_percent", "memory_limit_bytes"} {
		if _, ok := res[field]; !ok {
			t.Errorf("no %s in %v", field, res)
		}
	}
	num := func(field string) float64 {
		n, ok := res[field].(json.Number)
		if !ok {
			t.Fatalf("%s = %v (%T), want a number", field, res[field], res[field])
		}
		f, err := n.Float64()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, field := range []string{"parties_split", "tickets_lost", "tickets_matched_twice"} {
		if n := num(field); n != 0 {
			t.Errorf("%s = %v, want 0", field, res[field])
		}
	}
	if tps := num("tickets_per_sec"); tps <= 0 {
		t.Errorf("tickets_per_sec = %v: no rate from 100/s up was sustained", res["tickets_per_sec"])
	}
	if matched := num("tickets_matched"); matched == 0 {
		t.Errorf("no ticket of the first phase was matched: %v", res)
	}
	if res["replica_killed"] != true {
		t.Errorf("replica_killed = %v, want true", res["replica_killed"])
	}
	if g := num("gc_percent"); int(g) != gcpolicy.ServerGCPercent {
		t.Errorf("gc_percent = %v, want the gateways' %d", res["gc_percent"], gcpolicy.ServerGCPercent)
	}
}
