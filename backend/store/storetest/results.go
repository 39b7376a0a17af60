package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for what match results carry beyond the score: stats, place and
// team; result rules; stat leaderboards; ratings.

func testResultStats(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "stats")
	a := mustAccount(t, s, tn.ID, "dev-stats-a000000")
	mustMatch(t, s, tn.ID, "m1", "arena")
	stats := map[string]int64{"kills": 12, "deaths": 4, "coins": 7, "score": 12}
	for seq, final := range []bool{false, true} {
		st := maps.Clone(stats)
		st["kills"] += int64(seq)
		_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "m1", Seq: int64(seq + 1), Final: final, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 12, Stats: st, Place: 2, Team: 3}}})
		must(t, "report", err)
	}
	res, err := s.MatchResult(ctx, tn.ID, "m1")
	must(t, "result", err)
	stats["kills"] = 13 // the final report's
	if len(res.Players) != 1 || !maps.Equal(res.Players[0].Stats, stats) || res.Players[0].Place != 2 || res.Players[0].Team != 3 {
		t.Fatalf("stored result %+v, want stats %v place 2 team 3", res.Players, stats)
	}
	list, err := s.ListMatchResults(ctx, tn.ID, a.ID, 10)
	must(t, "list", err)
	if len(list) != 1 || !maps.Equal(list[0].Players[0].Stats, stats) {
		t.Fatalf("listed %+v", list)
	}
}

func testResultRules(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "rules"), mustTenant(t, s, "rules2")
	if rs, err := s.ResultRules(ctx, tn.ID); err != nil || len(rs) != 0 {
		t.Fatalf("rules of a new tenant: %v, %v", rs, err)
	}
	rules := []store.ResultRule{
		{Stat: "kills", Kind: store.RuleXP, PerUnit: 10, Cap: 500},
		{Game: "arena", Stat: "coins", Kind: store.RuleCurrency, Target: "gold", PerUnit: 1, Cap: 100},
		{Stat: "wins", Kind: store.RuleLeaderboard},
	}
	must(t, "put", s.PutResultRules(ctx, tn.ID, rules))
	got, err := s.ResultRules(ctx, tn.ID)
	must(t, "get", err)
	if !slices.Equal(got, rules) {
		t.Fatalf("rules = %+v, want %+v", got, rules)
	}
	if rs, _ := s.ResultRules(ctx, other.ID); len(rs) != 0 {
		t.Fatalf("another tenant sees %+v", rs)
	}
	// Put replaces; none clears.
	must(t, "replace", s.PutResultRules(ctx, tn.ID, rules[1:2]))
	if got, _ := s.ResultRules(ctx, tn.ID); !slices.Equal(got, rules[1:2]) {
		t.Fatalf("after replace: %+v", got)
	}
	must(t, "clear", s.PutResultRules(ctx, tn.ID, nil))
	if got, _ := s.ResultRules(ctx, tn.ID); len(got) != 0 {
		t.Fatalf("after clear: %+v", got)
	}
	wantErr(t, "unknown tenant", s.PutResultRules(ctx, "t_nope", rules), store.ErrNotFound)
}

func testStatBoards(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "boards")
	a := mustAccount(t, s, tn.ID, "dev-boards-a00000")
	b := mustAccount(t, s, tn.ID, "dev-boards-b00000")
	for i, m := range []string{"m1", "m2"} {
		mustMatch(t, s, tn.ID, m, "arena")
		r := store.MatchReport{TenantID: tn.ID, MatchID: m, Seq: 1, Final: true, At: base,
			Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}, {AccountID: b.ID, Score: 2}},
			Boards: []store.BoardEntry{{Board: "arena/wins", AccountID: a.ID, Value: int64(i)},
				{Board: "arena/wins", AccountID: b.ID, Value: 1},
				{Board: "arena/wins", AccountID: "a_gone", Value: 5}}} // no such account: skipped
		for range 2 { // a retried final feeds nothing twice
			_, err := s.ApplyMatchReport(ctx, r)
			must(t, "final", err)
		}
	}
	es, err := s.Leaderboard(ctx, tn.ID, "arena/wins", false, 0, 10)
	must(t, "board", err)
	if len(es) != 2 || es[0].AccountID != b.ID || es[0].Sum != 2 || es[0].Matches != 2 || es[1].Sum != 1 || es[1].Best != 1 {
		t.Fatalf("wins board = %+v", es)
	}
	// The score board is apart.
	es, err = s.Leaderboard(ctx, tn.ID, "arena", false, 0, 10)
	must(t, "score board", err)
	if len(es) != 2 || es[0].Sum != 4 {
		t.Fatalf("score board = %+v", es)
	}
}

// winnerTakes is a stand-in for Glicko-2: the first player gains 10, the
// others lose 10; it records what it was given.
type winnerTakes struct {
	mu    sync.Mutex
	calls [][]store.Rating
}

func (w *winnerTakes) rate(before []store.Rating) ([]store.Rating, error) {
	w.mu.Lock()
	w.calls = append(w.calls, slices.Clone(before))
	w.mu.Unlock()
	out := make([]store.Rating, len(before))
	for i, b := range before {
		r := b.Rating
		if b.Matches == 0 {
			r = 1500
		}
		d := -10.0
		if i == 0 {
			d = 10
		}
		out[i] = store.Rating{Rating: r + d, RD: 300, Volatility: 0.06}
	}
	return out, nil
}

func testRatings(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "ratings"), mustTenant(t, s, "ratings2")
	a := mustAccount(t, s, tn.ID, "dev-rate-a000000")
	b := mustAccount(t, s, tn.ID, "dev-rate-b000000")
	if a.ID > b.ID {
		a, b = b, a // the stand-in rewards the first in account order
	}
	w := &winnerTakes{}
	final := func(match string) store.MatchReport {
		return store.MatchReport{TenantID: tn.ID, MatchID: match, Seq: 1, Final: true, At: base.Add(time.Minute),
			Players: []store.PlayerReport{{AccountID: b.ID, Place: 2}, {AccountID: a.ID, Place: 1}, {AccountID: "a_gone"}},
			Rating:  &store.RatingUpdate{Mode: "duel", Rate: w.rate}}
	}
	mustMatch(t, s, tn.ID, "r1", "arena")
	for range 3 { // applied once however often it arrives
		_, err := s.ApplyMatchReport(ctx, final("r1"))
		must(t, "final", err)
	}
	if len(w.calls) != 1 || len(w.calls[0]) != 2 || w.calls[0][0].AccountID != a.ID || w.calls[0][0].Matches != 0 {
		t.Fatalf("Rate calls = %+v", w.calls)
	}
	rs, err := s.Ratings(ctx, tn.ID, "duel", []string{a.ID, b.ID, "a_other"})
	must(t, "ratings", err)
	if len(rs) != 2 || rs[a.ID].Rating != 1510 || rs[b.ID].Rating != 1490 || rs[a.ID].Matches != 1 || rs[a.ID].RD != 300 ||
		!rs[a.ID].UpdatedAt.Equal(base.Add(time.Minute)) || rs[a.ID].Mode != "duel" || rs[a.ID].TenantID != tn.ID {
		t.Fatalf("ratings = %+v", rs)
	}
	mustMatch(t, s, tn.ID, "r2", "arena")
	_, err = s.ApplyMatchReport(ctx, final("r2"))
	must(t, "second match", err)
	if got := w.calls[1]; got[0].Rating != 1510 || got[0].Matches != 1 || got[0].RD != 300 {
		t.Fatalf("second match rated from %+v", got)
	}
	rs, _ = s.Ratings(ctx, tn.ID, "duel", []string{a.ID})
	if rs[a.ID].Rating != 1520 || rs[a.ID].Matches != 2 {
		t.Fatalf("after two matches %+v", rs[a.ID])
	}
	// Modes and tenants are apart.
	if rs, _ := s.Ratings(ctx, tn.ID, "ffa", []string{a.ID}); len(rs) != 0 {
		t.Fatalf("other mode: %+v", rs)
	}
	if rs, _ := s.Ratings(ctx, other.ID, "duel", []string{a.ID}); len(rs) != 0 {
		t.Fatalf("other tenant: %+v", rs)
	}
	// An error from Rate fails the whole report: nothing stored.
	mustMatch(t, s, tn.ID, "r3", "arena")
	r := final("r3")
	r.Rating.Rate = func([]store.Rating) ([]store.Rating, error) { return nil, errors.New("boom") }
	if _, err := s.ApplyMatchReport(ctx, r); err == nil {
		t.Fatal("a failing Rate was ignored")
	}
	if _, err := s.MatchResult(ctx, tn.ID, "r3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("result of a failed report: %v", err)
	}
	// Deleting an account deletes its ratings.
	must(t, "delete", s.DeleteAccount(ctx, tn.ID, a.ID))
	if rs, _ := s.Ratings(ctx, tn.ID, "duel", []string{a.ID}); len(rs) != 0 {
		t.Fatalf("ratings of a deleted account: %+v", rs)
	}
}

// testRatingsConcurrent: final results of matches sharing a player, applied
// at once, each rate from the other's outcome (no lost update).
func testRatingsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "ratingsc")
	a := mustAccount(t, s, tn.ID, "dev-ratec-a00000")
	b := mustAccount(t, s, tn.ID, "dev-ratec-b00000")
	if a.ID > b.ID {
		a, b = b, a
	}
	const n = 16
	w := &winnerTakes{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		m := "c" + string(rune('a'+i))
		mustMatch(t, s, tn.ID, m, "arena")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: m, Seq: 1, Final: true, At: base,
				Players: []store.PlayerReport{{AccountID: a.ID, Place: 1}, {AccountID: b.ID, Place: 2}},
				Rating:  &store.RatingUpdate{Mode: "duel", Rate: w.rate}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "concurrent final", err)
	}
	rs, err := s.Ratings(ctx, tn.ID, "duel", []string{a.ID, b.ID})
	must(t, "ratings", err)
	if rs[a.ID].Rating != 1500+10*n || rs[a.ID].Matches != n || rs[b.ID].Rating != 1500-10*n {
		t.Fatalf("after %d concurrent results: %+v", n, rs)
	}
}
