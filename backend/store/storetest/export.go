package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for what an account export reads: the whole ledger and the
// account's rows of its match results, streamed; and ListMatchResults,
// which reads results with their players.

func testAccountExportReads(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "exp"), mustTenant(t, s, "exp2")
	a := mustAccount(t, s, tn.ID, "dev-exp-a0000000")
	b := mustAccount(t, s, tn.ID, "dev-exp-b0000000")
	stranger := mustAccount(t, s, other.ID, "dev-exp-x0000000")

	// 300 ledger entries of a (more than Ledger's callers ask for), some of b.
	for i := range 150 {
		_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: fmt.Sprint("g", i),
			Currency: map[string]int64{"gold": 1, "gems": 2}, Reason: "r", At: base.Add(time.Duration(i) * time.Second)})
		must(t, "grant a", err)
	}
	_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: b.ID, Key: "g", Currency: map[string]int64{"gold": 1}, At: base})
	must(t, "grant b", err)
	var seqs []int64
	must(t, "each ledger entry", s.EachLedgerEntry(ctx, tn.ID, a.ID, func(e store.LedgerEntry) error {
		seqs = append(seqs, e.Seq)
		return nil
	}))
	if len(seqs) != 300 {
		t.Fatalf("ledger of a: %d entries, want 300", len(seqs))
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] >= seqs[i-1] {
			t.Fatalf("ledger not newest first at %d: %v", i, seqs[i-1:i+1])
		}
	}
	newest, err := s.Ledger(ctx, tn.ID, a.ID, 1)
	must(t, "ledger", err)
	if newest[0].Seq != seqs[0] {
		t.Fatalf("first entry %d, Ledger's newest %d", seqs[0], newest[0].Seq)
	}
	// An error of fn stops the iteration and comes back as is.
	stop := errors.New("stop")
	n := 0
	err = s.EachLedgerEntry(ctx, tn.ID, a.ID, func(store.LedgerEntry) error { n++; return stop })
	if err != stop || n != 1 {
		t.Fatalf("fn's error: err = %v after %d calls, want stop after 1", err, n)
	}
	// Another tenant's view of a: nothing.
	must(t, "each ledger entry, other tenant", s.EachLedgerEntry(ctx, other.ID, a.ID, func(store.LedgerEntry) error {
		t.Fatal("other tenant reads a's ledger")
		return nil
	}))

	// 12 results: a plays 10 of them (two ending at the same time), b all;
	// one running match of a; one match without players; another tenant's.
	for i := range 12 {
		mid := fmt.Sprintf("m%02d", i)
		mustMatch(t, s, tn.ID, mid, "arena")
		players := []store.PlayerReport{{AccountID: b.ID, Score: int64(i), Stats: map[string]int64{"kills": 1}}}
		if i < 10 {
			players = append(players, store.PlayerReport{AccountID: a.ID, Score: int64(100 + i), XP: int64(i),
				Currency: map[string]int64{"gold": int64(i + 1)}, Items: map[string]int64{"gem": 1}, Stats: map[string]int64{"kills": int64(i)},
				Place: 1, Team: 2})
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if i == 3 {
			at = base.Add(2 * time.Minute) // the same end as m02
		}
		_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: at, Players: players})
		must(t, "result "+mid, err)
	}
	mustMatch(t, s, tn.ID, "running", "arena")
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "running", Seq: 1, At: base,
		Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}}})
	must(t, "interim report", err)
	mustMatch(t, s, tn.ID, "empty", "arena")
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "empty", Final: true, At: base.Add(time.Hour)})
	must(t, "result without players", err)
	mustMatch(t, s, other.ID, "m00", "arena")
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: other.ID, MatchID: "m00", Final: true, At: base,
		Players: []store.PlayerReport{{AccountID: stranger.ID, Score: 1}}})
	must(t, "other tenant's result", err)

	var got []store.AccountMatch
	must(t, "each account match", s.EachAccountMatch(ctx, tn.ID, a.ID, func(m store.AccountMatch) error {
		got = append(got, m)
		return nil
	}))
	want := []string{"m09", "m08", "m07", "m06", "m05", "m04", "m02", "m03", "m01", "m00"}
	if len(got) != len(want) {
		t.Fatalf("a's matches: %d, want %d: %+v", len(got), len(want), got)
	}
	for i, m := range got {
		if m.MatchID != want[i] {
			t.Fatalf("a's match %d is %s, want %s (newest first, ties by id)", i, m.MatchID, want[i])
		}
	}
	m := got[0] // m09
	p := m.Player
	if m.Game != "arena" || !m.EndedAt.Equal(base.Add(9*time.Minute)) || p.AccountID != a.ID || p.Score != 109 || p.XP != 9 ||
		p.Currency["gold"] != 10 || p.Items["gem"] != 1 || p.Stats["kills"] != 9 || p.Place != 1 || p.Team != 2 || p.ItemsUsed == nil {
		t.Fatalf("a's row of m09 = %+v", m)
	}
	n = 0
	if err := s.EachAccountMatch(ctx, tn.ID, a.ID, func(store.AccountMatch) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error: err = %v after %d calls, want stop after 1", err, n)
	}
	must(t, "each account match, other tenant", s.EachAccountMatch(ctx, other.ID, a.ID, func(store.AccountMatch) error {
		t.Fatal("other tenant reads a's matches")
		return nil
	}))

	// ListMatchResults: each result with all its players (score first),
	// a result without players too.
	rs, err := s.ListMatchResults(ctx, tn.ID, "", 100)
	must(t, "list results", err)
	if len(rs) != 13 || rs[0].MatchID != "empty" || len(rs[0].Players) != 0 || rs[1].MatchID != "m11" || len(rs[1].Players) != 1 {
		t.Fatalf("results = %+v", rs)
	}
	for _, r := range rs[3:] { // m09 .. m00: a and b
		if len(r.Players) != 2 || r.Players[0].AccountID != a.ID || r.Players[1].AccountID != b.ID || r.TenantID != tn.ID {
			t.Fatalf("result %s players = %+v", r.MatchID, r.Players)
		}
	}
	rs, err = s.ListMatchResults(ctx, tn.ID, a.ID, 3)
	must(t, "list a's results", err)
	if len(rs) != 3 || rs[0].MatchID != "m09" || rs[2].MatchID != "m07" || len(rs[2].Players) != 2 {
		t.Fatalf("a's results = %+v", rs)
	}
	r, err := s.MatchResult(ctx, tn.ID, "m02")
	must(t, "match result", err)
	if len(r.Players) != 2 || r.Players[0].Score != 102 || !r.EndedAt.Equal(base.Add(2*time.Minute)) {
		t.Fatalf("m02 = %+v", r)
	}
	_, err = s.MatchResult(ctx, tn.ID, "running")
	wantErr(t, "result of a running match", err, store.ErrNotFound)
}
