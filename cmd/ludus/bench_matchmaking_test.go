package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/internal/gcpolicy"
	"ludus.dev/ludus/matchmaker"
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
		retention: etcdserver.DefaultCompactionRetention, replicas: 2, maxParty: mmMaxParty, kill: true,
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
	if mp := num("max_party"); mp != mmMaxParty {
		t.Errorf("max_party = %v, want the default %d", res["max_party"], mmMaxParty)
	}
	// Parties of 1-4: more players than tickets, each costing less.
	if p, tk := num("saturation_players"), num("saturation_tickets"); p <= tk {
		t.Errorf("saturation_players = %v, saturation_tickets = %v: want more players than tickets", p, tk)
	}
	if pp, pt := num("saturation_cpu_ms_per_player"), num("saturation_cpu_ms_per_ticket"); !(pp > 0 && pp < pt) {
		t.Errorf("saturation_cpu_ms_per_player = %v, per ticket %v: want 0 < per player < per ticket", pp, pt)
	}
	if g := num("gc_percent"); int(g) != gcpolicy.ServerGCPercent {
		t.Errorf("gc_percent = %v, want the gateways' %d", res["gc_percent"], gcpolicy.ServerGCPercent)
	}
}

// TestTallyCountsWhatPlayersWereTold checks the bench's own bookkeeping: a
// player told of a game it is not seated in, or seated in two, counts as
// matched twice; a game nobody was told of is waste; a party seated on two
// teams is split; a ticket refused, timed out or with no outcome at all is
// counted as such.
func TestTallyCountsWhatPlayersWereTold(t *testing.T) {
	seat := func(acc, party string) matchmaker.Seat { return matchmaker.Seat{AccountID: acc, Party: party} }
	games := map[string][][]matchmaker.Seat{
		"g1":     {{seat("a", ""), seat("b", "p1")}, {seat("c", "p1"), {Bot: true}}}, // the party p1 on two teams
		"g2":     {{seat("d", "")}, {seat("e", "")}},
		"unseen": {{seat("z", "")}}, // nobody was told of it
	}
	now := time.Now()
	tk := func(accs ...string) *mmTicket { return &mmTicket{arrived: now, accounts: accs} }
	told := tk("a")
	told.found, told.matched = map[string]string{"a": "g1"}, now.Add(time.Second)
	party := tk("b", "c")
	party.found = map[string]string{"b": "g1", "c": "g1"}
	wrong := tk("d") // seated in g2, told of g1
	wrong.found = map[string]string{"d": "g1"}
	seatedTold := tk("e")
	seatedTold.found = map[string]string{"e": "g2"}
	timedOut := tk("f")
	timedOut.setOther("f", "timed out")
	refused := tk("g")
	refused.refused = true
	refused.setOther("g", "error: overloaded")
	lost := tk("h")

	got := tally([]*mmTicket{told, party, wrong, seatedTold, timedOut, refused, lost}, games, 0)
	want := mmTally{matched: 4, timedOut: 1, refused: 1, lost: 1, split: 1, twice: 1, matches: 2, waste: 1}
	got.waits, got.spreads = nil, nil
	if got.matched != want.matched || got.timedOut != want.timedOut || got.refused != want.refused ||
		got.lost != want.lost || got.split != want.split || got.twice != want.twice ||
		got.matches != want.matches || got.waste != want.waste {
		t.Errorf("tally = %+v, want %+v", got, want)
	}
}

// TestMMLoadPartySizes checks -max-party: no party larger than it, and
// every size up to it drawn.
func TestMMLoadPartySizes(t *testing.T) {
	for _, maxParty := range []int{1, 2, mmMaxParty} {
		l := newMMLoad(context.Background(), nil, nil, 7, maxParty)
		seen := map[int]int{}
		for range 2000 {
			seen[len(l.party())]++
		}
		for size, n := range seen {
			if size < 1 || size > maxParty {
				t.Errorf("-max-party %d: %d parties of %d", maxParty, n, size)
			}
		}
		for size := 1; size <= maxParty; size++ {
			if seen[size] == 0 {
				t.Errorf("-max-party %d: no party of %d in 2000 (%v)", maxParty, size, seen)
			}
		}
	}
}

// TestBenchMatchmakingRefusesBadMaxParty: a -max-party the population
// cannot make is refused before anything starts.
func TestBenchMatchmakingRefusesBadMaxParty(t *testing.T) {
	for _, v := range []string{"0", "-1", "5"} {
		err := runBench(context.Background(), []string{"matchmaking", "-max-party", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-max-party") {
			t.Errorf("-max-party %s: err = %v, want a refusal naming -max-party", v, err)
		}
	}
}
