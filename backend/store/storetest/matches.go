package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for match reports and leaderboards.

func mustMatch(t *testing.T, s store.Store, tenantID, matchID, game string) {
	t.Helper()
	must(t, "CreateMatch", s.CreateMatch(context.Background(), store.Match{TenantID: tenantID, ID: matchID, Game: game,
		CredentialHash: hash("cred-" + tenantID + matchID), CreatedAt: base, ExpiresAt: base.Add(time.Hour)}))
}

func testMatchReports(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "mr"), mustTenant(t, s, "mr2")
	a := mustAccount(t, s, tn.ID, "dev-mr-a00000000")
	b := mustAccount(t, s, tn.ID, "dev-mr-b00000000")
	stranger := mustAccount(t, s, other.ID, "dev-mr-x00000000")
	mustMatch(t, s, tn.ID, "m1", "arena")
	m, err := s.MatchByCredential(ctx, hash("cred-"+tn.ID+"m1"))
	must(t, "by credential", err)
	if m.ID != "m1" || m.TenantID != tn.ID || m.Game != "arena" || !m.EndedAt.IsZero() {
		t.Fatalf("match = %+v", m)
	}
	wantErr(t, "duplicate match", s.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: "m1", Game: "x", CredentialHash: hash("other"), CreatedAt: base, ExpiresAt: base}), store.ErrAlreadyExists)

	report := func(seq int64, final bool, xpA, goldA, xpB int64) store.MatchReport {
		return store.MatchReport{TenantID: tn.ID, MatchID: "m1", Seq: seq, Final: final, At: base.Add(time.Duration(seq) * time.Second),
			Players: []store.PlayerReport{
				{AccountID: a.ID, Score: xpA, XP: xpA, Currency: map[string]int64{"gold": goldA}, ItemsUsed: map[string]int64{"potion": 1}},
				{AccountID: b.ID, Score: xpB, XP: xpB},
				{AccountID: stranger.ID, Score: 999, XP: 999}, // another tenant's account: ignored
			}}
	}
	apply := func(r store.MatchReport, want bool) {
		t.Helper()
		got, err := s.ApplyMatchReport(ctx, r)
		must(t, fmt.Sprintf("report seq %d final %v", r.Seq, r.Final), err)
		if got != want {
			t.Fatalf("report seq %d final %v: applied = %v, want %v", r.Seq, r.Final, got, want)
		}
	}
	// Interim reports out of order and replayed: cumulative totals apply once.
	apply(report(2, false, 20, 4, 10), true)
	apply(report(1, false, 10, 2, 5), false) // stale
	apply(report(2, false, 20, 4, 10), false)
	apply(report(3, false, 30, 6, 10), true)
	pa, _ := s.Progression(ctx, tn.ID, a.ID)
	pb, _ := s.Progression(ctx, tn.ID, b.ID)
	if pa.XP != 30 || pa.Currency["gold"] != 6 || pb.XP != 10 {
		t.Fatalf("after interim: a=%+v b=%+v", pa, pb)
	}
	// The final report, delivered twice.
	final := report(4, true, 50, 9, 12)
	final.Webhook = &store.WebhookDelivery{ID: "d_m1", TenantID: tn.ID, Event: "match.result", Payload: []byte(`{}`), NextAt: base, CreatedAt: base, UpdatedAt: base}
	apply(final, true)
	apply(final, false)
	_, err = s.ApplyMatchReport(ctx, report(5, false, 60, 9, 12))
	wantErr(t, "interim after final", err, store.ErrMatchEnded)
	pa, _ = s.Progression(ctx, tn.ID, a.ID)
	pb, _ = s.Progression(ctx, tn.ID, b.ID)
	if pa.XP != 50 || pa.Currency["gold"] != 9 || pb.XP != 12 {
		t.Fatalf("after final: a=%+v b=%+v", pa, pb)
	}
	if ps, _ := s.Progression(ctx, other.ID, stranger.ID); ps.XP != 0 {
		t.Fatalf("another tenant's account was granted %+v", ps)
	}
	res, err := s.MatchResult(ctx, tn.ID, "m1")
	must(t, "match result", err)
	if res.Game != "arena" || len(res.Players) != 2 || res.Players[0].AccountID != a.ID || res.Players[0].Score != 50 || res.Players[0].ItemsUsed["potion"] != 1 {
		t.Fatalf("result = %+v", res)
	}
	_, err = s.MatchResult(ctx, other.ID, "m1")
	wantErr(t, "result from other tenant", err, store.ErrNotFound)
	rs, err := s.ListMatchResults(ctx, tn.ID, b.ID, 10)
	must(t, "list results", err)
	if len(rs) != 1 || rs[0].MatchID != "m1" {
		t.Fatalf("results of b = %+v", rs)
	}
	if rs, _ := s.ListMatchResults(ctx, other.ID, "", 10); len(rs) != 0 {
		t.Fatalf("other tenant lists %+v", rs)
	}
	ds, err := s.ListDeliveries(ctx, tn.ID, 10)
	must(t, "deliveries", err)
	if len(ds) != 1 || ds[0].ID != "d_m1" || ds[0].State != store.DeliveryPending {
		t.Fatalf("deliveries = %+v", ds)
	}
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: other.ID, MatchID: "m1", Seq: 9, At: base})
	wantErr(t, "report to other tenant's match", err, store.ErrNotFound)
}

func testMatchReportsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "mrc")
	a := mustAccount(t, s, tn.ID, "dev-mrc-a0000000")
	mustMatch(t, s, tn.ID, "m", "arena")
	var wg sync.WaitGroup
	var applied atomic.Int32
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq := int64(i%4 + 1)
			r := store.MatchReport{TenantID: tn.ID, MatchID: "m", Seq: seq, Final: i%4 == 3, At: base,
				Players: []store.PlayerReport{{AccountID: a.ID, Score: 7, XP: seq * 10, Currency: map[string]int64{"gold": seq}}}}
			if i%4 == 3 {
				r.Players[0].XP, r.Players[0].Currency["gold"] = 100, 10
			}
			ok, err := s.ApplyMatchReport(ctx, r)
			if err != nil && !errors.Is(err, store.ErrMatchEnded) {
				t.Errorf("report: %v", err)
			}
			if ok && r.Final {
				applied.Add(1)
			}
		}()
	}
	wg.Wait()
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 100 || p.Currency["gold"] != 10 || applied.Load() != 1 {
		t.Fatalf("after concurrent reports: %+v, finals applied %d; want xp 100, gold 10, 1 final", p, applied.Load())
	}
	e, err := s.LeaderboardRank(ctx, tn.ID, "arena", true, a.ID)
	must(t, "rank", err)
	if e.Matches != 1 || e.Sum != 7 {
		t.Fatalf("leaderboard entry = %+v (a final applied more than once?)", e)
	}
}

func testLeaderboard(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "lb")
	var accs []store.Account
	for i := range 5 {
		accs = append(accs, mustAccount(t, s, tn.ID, fmt.Sprintf("dev-lb-%010d", i)))
	}
	// Two matches: best and sum differ in order.
	scores := [][]int64{{10, 50, 30, 0, 20}, {45, 0, 30, 5, 20}}
	for mi, sc := range scores {
		mid := fmt.Sprint("lbm", mi)
		mustMatch(t, s, tn.ID, mid, "arena")
		r := store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base}
		for i, a := range accs {
			r.Players = append(r.Players, store.PlayerReport{AccountID: a.ID, Score: sc[i]})
		}
		_, err := s.ApplyMatchReport(ctx, r)
		must(t, "final", err)
	}
	// best: a1 50, a0 45, a2 30, a4 20, a3 5; sum: a2 60, a0 55, a1 50, a4 40, a3 5
	top, err := s.Leaderboard(ctx, tn.ID, "arena", true, 0, 3)
	must(t, "top best", err)
	if len(top) != 3 || top[0].AccountID != accs[1].ID || top[0].Best != 50 || top[1].AccountID != accs[0].ID || top[2].Rank != 3 {
		t.Fatalf("top by best = %+v", top)
	}
	top, err = s.Leaderboard(ctx, tn.ID, "arena", false, 0, 5)
	must(t, "top sum", err)
	if len(top) != 5 || top[0].AccountID != accs[2].ID || top[0].Sum != 60 || top[0].Matches != 2 || top[4].AccountID != accs[3].ID {
		t.Fatalf("top by sum = %+v", top)
	}
	e, err := s.LeaderboardRank(ctx, tn.ID, "arena", false, accs[4].ID)
	must(t, "rank", err)
	if e.Rank != 4 || e.Sum != 40 {
		t.Fatalf("rank of a4 by sum = %+v", e)
	}
	page, _ := s.Leaderboard(ctx, tn.ID, "arena", false, int(e.Rank)-2, 3)
	if len(page) != 3 || page[1].AccountID != accs[4].ID || page[1].Rank != 4 {
		t.Fatalf("around a4 = %+v", page)
	}
	_, err = s.LeaderboardRank(ctx, tn.ID, "other-game", true, accs[0].ID)
	wantErr(t, "rank in another game", err, store.ErrNotFound)
}

// testUnreportedMatchSweep: DeleteUnreportedMatches deletes the matches
// that never reported once their credential expired, with their rosters,
// oldest first up to its limit, and no match that reported (interim or
// final) or can still report.
func testUnreportedMatchSweep(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "um")
	a := mustAccount(t, s, tn.ID, "dev-um-a00000000")
	mk := func(id string, expires time.Duration) {
		t.Helper()
		must(t, "CreateMatch "+id, s.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: id, Game: "arena",
			CredentialHash: hash("cred-um-" + id), CreatedAt: base, ExpiresAt: base.Add(expires)}))
	}
	mk("never", time.Hour)      // never reported
	mk("rostered", 2*time.Hour) // players joined, never reported
	mk("interim", time.Hour)    // an interim report
	mk("final", time.Hour)      // a result
	mk("young", 48*time.Hour)   // may still report
	must(t, "roster", s.AddMatchPlayers(ctx, tn.ID, "rostered", []string{a.ID}, base))
	players := []store.PlayerReport{{AccountID: a.ID, Score: 3}}
	_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "interim", Seq: 1, Players: players, At: base})
	must(t, "interim report", err)
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "final", Seq: 1, Final: true, Players: players, At: base})
	must(t, "final report", err)

	del := func(now time.Duration, limit, want int) {
		t.Helper()
		n, err := s.DeleteUnreportedMatches(ctx, base.Add(now), limit)
		if err != nil || n != want {
			t.Fatalf("DeleteUnreportedMatches(base+%v, %d) = %d, %v; want %d", now, limit, n, err, want)
		}
	}
	del(time.Hour-time.Second, 10, 0) // nothing expired yet
	del(3*time.Hour, 1, 1)            // the oldest expiry first: never
	if _, err := s.MatchByCredential(ctx, hash("cred-um-never")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the unreported match after its deletion: %v", err)
	}
	if _, err := s.MatchByCredential(ctx, hash("cred-um-rostered")); err != nil {
		t.Fatalf("a match beyond the limit: %v", err)
	}
	del(3*time.Hour, 10, 1) // rostered, and its roster
	wantRoster(t, s, tn.ID, "rostered")
	del(3*time.Hour, 10, 0)
	for _, id := range []string{"interim", "final", "young"} {
		if _, err := s.MatchByCredential(ctx, hash("cred-um-"+id)); err != nil {
			t.Fatalf("match %s: %v, want it kept", id, err)
		}
	}
	if _, err := s.MatchResult(ctx, tn.ID, "final"); err != nil {
		t.Fatalf("the final result after the sweep: %v", err)
	}
}
