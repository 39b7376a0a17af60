package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// TestBigReport: a final result whose single writing statement would take
// more parameters than PostgreSQL accepts (65,535: 100 players on 110 stat
// boards each) is written a statement per table instead, and completely.
func TestBigReport(t *testing.T) {
	ctx := context.Background()
	s := openWithTenant(t)
	if err := s.CreateMatch(ctx, store.Match{TenantID: "t_g", ID: "m_1", Game: "arena", CredentialHash: []byte("c"), CreatedAt: t0,
		ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	const players, boards = 100, 110
	r := store.MatchReport{TenantID: "t_g", MatchID: "m_1", Final: true, At: t0,
		Rating: &store.RatingUpdate{Mode: "arena", Rate: func(before []store.Rating) ([]store.Rating, error) {
			for i := range before {
				before[i].Rating = 1500 + float64(i)
			}
			return before, nil
		}}}
	for i := range players {
		id := fmt.Sprintf("a_%03d", i)
		if err := s.CreateAccount(ctx, newAccount(id, "t_g", "dev-"+id)); err != nil {
			t.Fatal(err)
		}
		r.Players = append(r.Players, store.PlayerReport{AccountID: id, Score: int64(i), XP: 10, Currency: map[string]int64{"gold": 2}})
		for b := range boards {
			r.Boards = append(r.Boards, store.BoardEntry{Board: fmt.Sprintf("stat%03d", b), AccountID: id, Value: int64(b)})
		}
	}
	applied, err := s.ApplyMatchReport(ctx, r)
	if err != nil || !applied {
		t.Fatalf("ApplyMatchReport: applied %v, %v", applied, err)
	}
	for _, board := range []string{"arena", "stat000", "stat109"} {
		es, err := s.Leaderboard(ctx, "t_g", board, false, 0, 1000)
		if err != nil || len(es) != players {
			t.Errorf("board %s: %d entries, %v; want %d", board, len(es), err, players)
		}
	}
	p, err := s.Progression(ctx, "t_g", "a_042")
	if err != nil || p.XP != 10 || p.Currency["gold"] != 2 {
		t.Errorf("progression of a_042: %+v, %v", p, err)
	}
	rs, err := s.Ratings(ctx, "t_g", "arena", []string{"a_000", "a_099"})
	if err != nil || rs["a_000"].Matches != 1 || rs["a_099"].Rating != 1599 {
		t.Errorf("ratings: %+v, %v", rs, err)
	}
}
