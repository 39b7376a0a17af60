package postgres

import (
	"context"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Two backend replicas on one database, and a report of a match that waits
// for another report of it: replica A has claimed the match for interim
// report 2 and is held (a test transaction locks the player's progression
// row); replica B's report of the match (the final, or interim 3) waits for
// the match row. When A commits, B must apply its own grants on top of
// A's, not A's again: its first statement read the totals from before A,
// so its claim misses and it runs again (sqlstore.ErrReportRaced). The
// player's totals are 30 XP and 3 gold whatever the order; before the
// guard the progression had 50 and 5.
func TestReportsRaceAcrossReplicas(t *testing.T) {
	for _, final := range []bool{true, false} {
		name := map[bool]string{true: "interim then final", false: "interim then interim"}[final]
		t.Run(name, func(t *testing.T) { raceReports(t, final) })
	}
}

func raceReports(t *testing.T, secondFinal bool) {
	ctx := context.Background()
	rep := func(seq int64, final bool, xp, gold int64) store.MatchReport {
		return store.MatchReport{TenantID: "t_g", MatchID: "m_1", Seq: seq, Final: final, At: t0,
			Players: []store.PlayerReport{{AccountID: "a_1", XP: xp, Currency: map[string]int64{"gold": gold}}}}
	}
	r := newReplicaRace(t, func(a *Store) {
		if ok, err := a.ApplyMatchReport(ctx, rep(1, false, 10, 1)); err != nil || !ok {
			t.Fatal(ok, err)
		}
	})
	type res struct {
		ok  bool
		err error
	}
	ra, rb := make(chan res, 1), make(chan res, 1)
	go func() { ok, err := r.a.ApplyMatchReport(ctx, rep(2, false, 20, 2)); ra <- res{ok, err} }()
	r.waitLock("WITH mp AS (INSERT INTO match_players%") // A claimed; it waits on the progression row
	go func() {
		ok, err := r.b.ApplyMatchReport(ctx, rep(3, secondFinal, 30, 3))
		rb <- res{ok, err}
	}()
	r.waitLock("WITH c AS (UPDATE matches%") // B's claim waits on the match row
	r.release()
	x, y := <-ra, <-rb
	if x.err != nil || !x.ok || y.err != nil || !y.ok {
		t.Fatalf("A's interim 2: %v %v; B's report 3: %v %v; want both applied", x.ok, x.err, y.ok, y.err)
	}
	p, err := r.a.Progression(ctx, "t_g", "a_1")
	if err != nil {
		t.Fatal(err)
	}
	if p.XP != 30 || p.Currency["gold"] != 3 {
		t.Errorf("the match's totals are 30 XP and 3 gold; the progression has %d XP and %d gold", p.XP, p.Currency["gold"])
	}
	led, err := r.a.Ledger(ctx, "t_g", "a_1", 10)
	if err != nil {
		t.Fatal(err)
	}
	sum := int64(0)
	for _, e := range led {
		sum += e.Delta
	}
	if sum != 3 {
		t.Errorf("the ledger's gold entries sum to %d, want 3: %+v", sum, led)
	}
}

// replicaRace is two stores on one fresh database (two backend replicas)
// with tenant t_g, account a_1 and match m_1; prepare runs before the
// player's progression row is locked by a test transaction (release
// commits it), which holds a report that claimed the match in the middle of
// its writes. waitLock waits until a statement like the pattern waits on a
// lock.
type replicaRace struct {
	a, b     *Store
	release  func()
	waitLock func(pattern string)
}

func newReplicaRace(t *testing.T, prepare func(a *Store)) *replicaRace {
	t.Helper()
	ctx := context.Background()
	a, dsn := openFreshDSN(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.CreateTenant(ctx, store.Tenant{ID: "t_g", Slug: "g", Name: "G", CreatedAt: t0}))
	b, err := Open(ctx, dsn)
	must(err)
	t.Cleanup(func() { b.Close() })
	must(a.CreateAccount(ctx, newAccount("a_1", "t_g", "dev-1")))
	must(a.CreateMatch(ctx, store.Match{TenantID: "t_g", ID: "m_1", Game: "arena", CredentialHash: []byte("c"), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
	prepare(a)
	lock, err := a.db.BeginTx(ctx, nil)
	must(err)
	t.Cleanup(func() { lock.Rollback() })
	var one int
	must(lock.QueryRowContext(ctx, `SELECT 1 FROM progression WHERE account_id = 'a_1' FOR UPDATE`).Scan(&one))
	return &replicaRace{a: a, b: b,
		release: func() { must(lock.Commit()) },
		waitLock: func(like string) {
			waitFor(t, like, func() bool {
				var n int
				a.db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND wait_event_type = 'Lock' AND query LIKE $1`, like).Scan(&n)
				return n > 0
			})
		}}
}

// The sweep of unreported matches must not delete a match whose first
// report commits while the sweep's DELETE waits for its row: PostgreSQL
// re-checks only the DELETE's own WHERE on the committed row, not its
// subquery's.
func TestSweepSparesAMatchReportedMeanwhile(t *testing.T) {
	ctx := context.Background()
	r := newReplicaRace(t, func(a *Store) {
		if _, err := a.ApplyChange(ctx, store.Change{TenantID: "t_g", AccountID: "a_1", Key: "k", XP: 1, At: t0}); err != nil {
			t.Fatal(err)
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := r.a.ApplyMatchReport(ctx, store.MatchReport{TenantID: "t_g", MatchID: "m_1", Seq: 100, Final: true, At: t0,
			Players: []store.PlayerReport{{AccountID: "a_1", XP: 5, Score: 7}}})
		done <- err
	}()
	r.waitLock("WITH mp AS (INSERT INTO match_players%")
	swept := make(chan int, 1)
	go func() {
		n, err := r.b.DeleteUnreportedMatches(ctx, t0.Add(2*time.Hour), 10)
		if err != nil {
			t.Error(err)
		}
		swept <- n
	}()
	r.waitLock("DELETE FROM matches%")
	r.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := <-swept; n != 0 {
		t.Errorf("the sweep deleted %d matches, want 0: the match reported meanwhile", n)
	}
	if _, err := r.a.MatchResult(ctx, "t_g", "m_1"); err != nil {
		t.Errorf("the result applied (its progression credited) is gone: %v", err)
	}
}
