package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// These tests drive the group commit's rounds of match reports (sqlstore
// commit.go, Dialect.Pipeline): the reports of a batch send their first
// statements together, then their second ones.

// pipeRate rates a match from the players' ratings before it in a way
// whose outcome depends on them (and on their order): a report rated from
// a stale row would store other values.
func pipeRate(before []store.Rating) ([]store.Rating, error) {
	out := make([]store.Rating, len(before))
	for i, b := range before {
		out[i] = store.Rating{Rating: b.Rating*1.01 + float64(7*(i+1)) + float64(b.Matches), RD: b.RD/2 + 100, Volatility: 0.06 + b.Volatility/10}
	}
	return out, nil
}

// pipeStore is a store with tenant t_g, accounts a_1, a_2 (the players)
// and a_hold, and matches m_0 to m_9.
func pipeStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s := openWithTenant(t)
	for _, id := range []string{"a_1", "a_2", "a_hold"} {
		if err := s.CreateAccount(ctx, newAccount(id, "t_g", "dev-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := s.CreateMatch(ctx, store.Match{TenantID: "t_g", ID: fmt.Sprintf("m_%d", i), Game: "arena",
			CredentialHash: []byte(fmt.Sprintf("cred %d", i)), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// pipeReport is a rated final report of match m by a_1 (first) and a_2.
func pipeReport(m string, n int) store.MatchReport {
	return store.MatchReport{TenantID: "t_g", MatchID: m, Final: true, At: t0.Add(time.Duration(n) * time.Second),
		Players: []store.PlayerReport{
			{AccountID: "a_1", Score: 10, XP: 10, Currency: map[string]int64{"gold": 1}, Place: 1},
			{AccountID: "a_2", Score: 5, XP: 10, Currency: map[string]int64{"gold": 1}, Place: 2},
		},
		Boards: []store.BoardEntry{{Board: "kills", AccountID: "a_1", Value: 3}},
		Rating: &store.RatingUpdate{Mode: "arena", Rate: pipeRate}}
}

type pipeOutcome struct {
	applied bool
	err     error
}

// applyBatch applies rs as one batch (the committer held until all are
// queued, in order) and returns their outcomes.
func applyBatch(t *testing.T, s *Store, rs []store.MatchReport) []pipeOutcome {
	t.Helper()
	ctx := context.Background()
	release := holdCommitter(t, s, "t_g", "a_hold")
	q := &queue{t: t}
	out := make([]pipeOutcome, len(rs))
	for i, r := range rs {
		q.add(func() { out[i].applied, out[i].err = s.ApplyMatchReport(ctx, r) })
	}
	if err := release(); err != nil {
		t.Fatalf("the held write: %v", err)
	}
	q.wg.Wait()
	return out
}

// TestPipelinedReportsIsolateFailures: in batches of reports sharing their
// players (so their rating rows), a report that fails in its first statement (a webhook delivery
// id taken) or its second (a currency name PostgreSQL refuses) gets its
// error and leaves nothing behind; the others are applied once, in one
// transaction, their ratings each from the one before as if they had run
// one after the other; a duplicate result and an interim report of an
// ended match, sent in the same batch as the report that ended it, change
// nothing.
func TestPipelinedReportsIsolateFailures(t *testing.T) {
	ctx := context.Background()
	s := pipeStore(t)
	first := pipeReport("m_0", 0)
	first.Webhook = &store.WebhookDelivery{ID: "d_taken", TenantID: "t_g", Event: "match.result", Payload: []byte("{}"),
		State: store.DeliveryPending, NextAt: t0, CreatedAt: t0, UpdatedAt: t0}
	if applied, err := s.ApplyMatchReport(ctx, first); err != nil || !applied {
		t.Fatalf("m_0: applied %v, %v", applied, err)
	}
	// Which transaction ended each match (txid_current() is the top-level
	// transaction's, savepoint or not).
	for _, stmt := range []string{
		`CREATE TABLE ended_by (match_id TEXT PRIMARY KEY, txid BIGINT NOT NULL)`,
		`CREATE FUNCTION log_ended() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO ended_by VALUES (NEW.id, txid_current()); RETURN NEW; END $$`,
		`CREATE TRIGGER log_ended AFTER UPDATE OF ended_at ON matches FOR EACH ROW WHEN (NEW.ended_at IS NOT NULL) EXECUTE FUNCTION log_ended()`,
	} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}

	// A failure in a second statement: the round's first statements ran.
	badSecond := pipeReport("m_4", 2)
	badSecond.Players[1].Currency = map[string]int64{"g\x00ld": 1}
	got := applyBatch(t, s, []store.MatchReport{pipeReport("m_1", 1), pipeReport("m_3", 3), badSecond})
	// A failure in a first statement, then reports that change nothing.
	badFirst := pipeReport("m_2", 5)
	badFirst.Webhook = &store.WebhookDelivery{ID: "d_taken", TenantID: "t_g", Event: "match.result", Payload: []byte("{}"),
		State: store.DeliveryPending, NextAt: t0, CreatedAt: t0, UpdatedAt: t0}
	interim := pipeReport("m_5", 7)
	interim.Final, interim.Seq = false, 1
	got = append(got, applyBatch(t, s, []store.MatchReport{pipeReport("m_5", 4), badFirst, pipeReport("m_1", 6), interim,
		pipeReport("m_6", 8)})...)
	// No failure: one round.
	got = append(got, applyBatch(t, s, []store.MatchReport{pipeReport("m_7", 9), pipeReport("m_8", 10), pipeReport("m_9", 11)})...)

	want := []struct {
		applied bool
		err     error
	}{{true, nil}, {true, nil}, {false, store.ErrInvalid}, {true, nil}, {false, store.ErrAlreadyExists}, {false, nil},
		{false, store.ErrMatchEnded}, {true, nil}, {true, nil}, {true, nil}, {true, nil}}
	for i, w := range want {
		if got[i].applied != w.applied || !errors.Is(got[i].err, w.err) || (w.err == nil) != (got[i].err == nil) {
			t.Errorf("report %d: applied %v, %v; want %v, %v", i, got[i].applied, got[i].err, w.applied, w.err)
		}
	}

	// Applied once each: m_0, m_1, m_3, m_5 to m_9.
	const n = 8
	for _, id := range []string{"a_1", "a_2"} {
		p, err := s.Progression(ctx, "t_g", id)
		if err != nil || p.XP != 10*n || p.Currency["gold"] != n || len(p.Currency) != 1 {
			t.Errorf("progression of %s: %+v, %v; want %d XP, %d gold", id, p, err, 10*n, n)
		}
	}
	results, err := s.ListMatchResults(ctx, "t_g", "a_2", 100)
	if err != nil || len(results) != n {
		t.Fatalf("results of a_2: %d, %v; want %d", len(results), err, n)
	}
	for _, m := range []string{"m_2", "m_4"} {
		got, err := s.MatchByCredential(ctx, []byte("cred "+m[2:]))
		if err != nil || !got.EndedAt.IsZero() {
			t.Errorf("match %s of a failed report: %+v, %v; want it not ended", m, got, err)
		}
	}
	var pending int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries`).Scan(&pending); err != nil || pending != 1 {
		t.Errorf("webhook deliveries: %d, %v; want 1", pending, err)
	}
	// The good reports of each batch committed together.
	for _, ms := range [][]string{{"m_1", "m_3"}, {"m_5", "m_6"}, {"m_7", "m_8", "m_9"}} {
		var txs int
		if err := s.db.QueryRowContext(ctx, `SELECT count(DISTINCT txid) FROM ended_by WHERE match_id = ANY($1)`, ms).Scan(&txs); err != nil || txs != 1 {
			t.Errorf("matches %v ended in %d transactions (%v), want 1", ms, txs, err)
		}
	}

	// The ratings are those of the same reports applied one by one.
	ref := pipeStore(t)
	for i, m := range []string{"m_0", "m_1", "m_3", "m_5", "m_6", "m_7", "m_8", "m_9"} {
		at := []int{0, 1, 3, 4, 8, 9, 10, 11}[i]
		if applied, err := ref.ApplyMatchReport(ctx, pipeReport(m, at)); err != nil || !applied {
			t.Fatalf("reference %s: applied %v, %v", m, applied, err)
		}
	}
	gotR, err := s.Ratings(ctx, "t_g", "arena", []string{"a_1", "a_2"})
	if err != nil {
		t.Fatal(err)
	}
	wantR, err := ref.Ratings(ctx, "t_g", "arena", []string{"a_1", "a_2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a_1", "a_2"} {
		g, w := gotR[id], wantR[id]
		if g.Rating != w.Rating || g.RD != w.RD || g.Volatility != w.Volatility || g.Matches != n || w.Matches != n ||
			!g.UpdatedAt.Equal(w.UpdatedAt) {
			t.Errorf("rating of %s: %+v; one by one: %+v", id, g, w)
		}
	}
}

// TestPipelinedReportsOfOneMatch: interim reports of one match in one
// batch never share a round (the second reads the totals the first
// writes): the player gets the highest total, not the sum.
func TestPipelinedReportsOfOneMatch(t *testing.T) {
	ctx := context.Background()
	s := pipeStore(t)
	var rs []store.MatchReport
	for seq, xp := range []int64{10, 25, 40} {
		r := pipeReport("m_1", seq)
		r.Final, r.Seq, r.Rating, r.Boards = false, int64(seq+1), nil, nil
		r.Players[0].XP, r.Players[0].Currency = xp, map[string]int64{"gold": xp}
		rs = append(rs, r)
	}
	final := pipeReport("m_1", 9)
	final.Seq, final.Players[0].XP, final.Players[0].Currency = 4, 50, map[string]int64{"gold": 50}
	rs = append(rs, final, pipeReport("m_2", 10))
	for i, o := range applyBatch(t, s, rs) {
		if o.err != nil || !o.applied {
			t.Errorf("report %d: applied %v, %v", i, o.applied, o.err)
		}
	}
	p, err := s.Progression(ctx, "t_g", "a_1")
	if err != nil || p.XP != 50+10 || p.Currency["gold"] != 50+1 {
		t.Errorf("progression of a_1: %+v, %v; want 60 XP and 51 gold", p, err)
	}
	rs2, err := s.Ratings(ctx, "t_g", "arena", []string{"a_1"})
	if err != nil || rs2["a_1"].Matches != 2 {
		t.Errorf("ratings: %+v, %v; want 2 rated matches", rs2, err)
	}
}

// TestPipelinedCommitFails: the COMMIT sent with a round's second
// statements fails (a deferred constraint): every report of the batch gets
// the error, none is applied, and the store writes on afterwards.
func TestPipelinedCommitFails(t *testing.T) {
	ctx := context.Background()
	s := pipeStore(t)
	for _, stmt := range []string{
		`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.id = 'm_2' THEN RAISE EXCEPTION 'poisoned batch'; END IF; RETURN NULL; END $$`,
		`CREATE CONSTRAINT TRIGGER refuse_poison AFTER UPDATE ON matches DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION refuse_poison()`,
	} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range applyBatch(t, s, []store.MatchReport{pipeReport("m_1", 1), pipeReport("m_2", 2), pipeReport("m_3", 3)}) {
		if o.err == nil || !strings.Contains(o.err.Error(), "poisoned batch") {
			t.Errorf("report %d: applied %v, %v; want the commit's error", i, o.applied, o.err)
		}
	}
	p, err := s.Progression(ctx, "t_g", "a_1")
	if err != nil || p.XP != 0 {
		t.Errorf("progression of a_1 after the failed batch: %+v, %v", p, err)
	}
	if applied, err := s.ApplyMatchReport(ctx, pipeReport("m_1", 4)); err != nil || !applied {
		t.Errorf("a report after the failed batch: applied %v, %v", applied, err)
	}
	if p, err := s.Progression(ctx, "t_g", "a_1"); err != nil || p.XP != 10 {
		t.Errorf("progression of a_1: %+v, %v; want 10 XP", p, err)
	}
}
