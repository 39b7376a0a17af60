package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// testAccountExportRows: the other rows an export reads, each of the
// account's own and in its tenant only, in order, streamed (an error of
// fn stops the read): its applied change keys, leaderboard rows, ratings,
// sessions (no token hashes: times only), unfinished matches and the
// rosters it is on.
func testAccountExportRows(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "xr"), mustTenant(t, s, "xr2")
	a := mustAccount(t, s, tn.ID, "dev-xr-a0000000")
	b := mustAccount(t, s, tn.ID, "dev-xr-b0000000")
	stranger := mustAccount(t, s, other.ID, "dev-xr-x0000000")
	stop := errors.New("stop")

	// Applied changes: grants (two at the same time) and reports.
	for i, key := range []string{"g2", "g1", "g0"} {
		_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: key, XP: 1, At: base.Add(time.Duration(min(i, 1)) * time.Second)})
		must(t, "grant "+key, err)
	}
	_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: b.ID, Key: "gb", XP: 1, At: base})
	must(t, "grant b", err)
	_, err = s.ApplyChange(ctx, store.Change{TenantID: other.ID, AccountID: stranger.ID, Key: "gx", XP: 1, At: base})
	must(t, "grant stranger", err)

	// Results: m1 ends with a stat board and a rating for a and b;
	// "running" has an interim report (a, b), "abandoned" one (a) and
	// never ends; "later" an interim report, then its final one.
	rate := func(before []store.Rating) ([]store.Rating, error) {
		for i := range before {
			before[i].Rating, before[i].RD, before[i].Volatility = 1600, 200, 0.06
			if before[i].AccountID == a.ID {
				before[i].Rating = 1500
			}
		}
		return before, nil
	}
	for i, mid := range []string{"m1", "abandoned", "running", "later"} {
		must(t, "CreateMatch", s.CreateMatch(ctx, store.Match{TenantID: tn.ID, ID: mid, Game: "arena", CredentialHash: hash("xr-" + mid),
			CreatedAt: base.Add(time.Duration(i) * time.Minute), ExpiresAt: base.Add(time.Hour)}))
	}
	// Rosters (before the results close them): a on m1, then on running
	// and abandoned at the same time; b on m1 and running.
	must(t, "roster m1", s.AddMatchPlayers(ctx, tn.ID, "m1", []string{a.ID, b.ID}, base.Add(time.Second)))
	must(t, "roster running", s.AddMatchPlayers(ctx, tn.ID, "running", []string{b.ID, a.ID}, base.Add(2*time.Second)))
	must(t, "roster abandoned", s.AddMatchPlayers(ctx, tn.ID, "abandoned", []string{a.ID}, base.Add(2*time.Second)))
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "m1", Final: true, At: base.Add(2 * time.Second),
		Players: []store.PlayerReport{{AccountID: a.ID, Score: 5}, {AccountID: b.ID, Score: 9}},
		Boards:  []store.BoardEntry{{Board: "arena/kills", AccountID: a.ID, Value: 3}, {Board: "arena/kills", AccountID: b.ID, Value: 4}},
		Rating:  &store.RatingUpdate{Mode: "duel", Rate: rate}})
	must(t, "result m1", err)
	for _, r := range []store.MatchReport{
		{MatchID: "abandoned", Seq: 1, Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}}},
		{MatchID: "running", Seq: 1, Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}, {AccountID: b.ID, Score: 2}}},
		{MatchID: "running", Seq: 2, Players: []store.PlayerReport{{AccountID: a.ID, Score: 6, Stats: map[string]int64{"kills": 2}}, {AccountID: b.ID, Score: 2}}},
		{MatchID: "later", Seq: 1, Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}}},
		{MatchID: "later", Final: true, Players: []store.PlayerReport{{AccountID: a.ID, Score: 2}}},
	} {
		r.TenantID, r.At = tn.ID, base.Add(3*time.Second)
		_, err := s.ApplyMatchReport(ctx, r)
		must(t, "report "+r.MatchID, err)
	}
	mustMatch(t, s, other.ID, "running", "arena")
	_, err = s.ApplyMatchReport(ctx, store.MatchReport{TenantID: other.ID, MatchID: "running", Seq: 1, At: base,
		Players: []store.PlayerReport{{AccountID: stranger.ID, Score: 1}}})
	must(t, "other tenant's report", err)
	must(t, "other tenant's roster", s.AddMatchPlayers(ctx, other.ID, "running", []string{stranger.ID}, base.Add(3*time.Second)))

	var changes []string
	must(t, "each applied change", s.EachAppliedChange(ctx, tn.ID, a.ID, func(c store.AppliedChange) error {
		changes = append(changes, c.Key+"@"+c.At.Sub(base).String())
		return nil
	}))
	// Newest first, ties by key.
	want := []string{"match/abandoned/1@3s", "match/later/1@3s", "match/later/final@3s", "match/running/1@3s", "match/running/2@3s",
		"match/m1/final@2s", "g0@1s", "g1@1s", "g2@0s"}
	if !slices.Equal(changes, want) {
		t.Fatalf("a's applied changes = %v, want %v", changes, want)
	}

	var boards []store.AccountBoard
	must(t, "each account board", s.EachAccountBoard(ctx, tn.ID, a.ID, func(x store.AccountBoard) error {
		boards = append(boards, x)
		return nil
	}))
	if wantBoards := []store.AccountBoard{{Board: "arena", Best: 5, Sum: 7, Matches: 2}, {Board: "arena/kills", Best: 3, Sum: 3, Matches: 1}}; !slices.Equal(boards, wantBoards) {
		t.Fatalf("a's boards = %+v, want %+v", boards, wantBoards)
	}

	var ratings []store.Rating
	must(t, "each account rating", s.EachAccountRating(ctx, tn.ID, a.ID, func(r store.Rating) error {
		ratings = append(ratings, r)
		return nil
	}))
	if len(ratings) != 1 || ratings[0].Mode != "duel" || ratings[0].AccountID != a.ID || ratings[0].TenantID != tn.ID ||
		ratings[0].Rating != 1500 || ratings[0].RD != 200 || ratings[0].Volatility != 0.06 || ratings[0].Matches != 1 ||
		!ratings[0].UpdatedAt.Equal(base.Add(2*time.Second)) {
		t.Fatalf("a's ratings = %+v", ratings)
	}

	var unfinished []store.AccountMatch
	must(t, "each unfinished account match", s.EachUnfinishedAccountMatch(ctx, tn.ID, a.ID, func(m store.AccountMatch) error {
		unfinished = append(unfinished, m)
		return nil
	}))
	if len(unfinished) != 2 || unfinished[0].MatchID != "running" || unfinished[1].MatchID != "abandoned" {
		t.Fatalf("a's unfinished matches = %+v, want running, abandoned", unfinished)
	}
	if m := unfinished[0]; m.Game != "arena" || !m.CreatedAt.Equal(base.Add(2*time.Minute)) || !m.EndedAt.IsZero() ||
		m.Player.AccountID != a.ID || m.Player.Score != 6 || m.Player.Stats["kills"] != 2 {
		t.Fatalf("a's row of running = %+v", m)
	}

	var rosters []string
	must(t, "each account roster entry", s.EachAccountRosterEntry(ctx, tn.ID, a.ID, func(e store.RosterEntry) error {
		rosters = append(rosters, e.MatchID+"@"+e.AddedAt.Sub(base).String())
		return nil
	}))
	// Newest first, ties by match id; neither b's entries nor the stranger's.
	if want := []string{"abandoned@2s", "running@2s", "m1@1s"}; !slices.Equal(rosters, want) {
		t.Fatalf("a's rosters = %v, want %v", rosters, want)
	}

	// Sessions: f1 refreshed twice, then signed out; f2 never refreshed;
	// b's and the stranger's apart.
	tok := func(name, family string, acc store.Account, at time.Time) store.RefreshToken {
		return store.RefreshToken{Hash: hash("xr-" + name), FamilyID: family, TenantID: acc.TenantID, AccountID: acc.ID, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	}
	must(t, "token f1", s.CreateRefreshToken(ctx, tok("f1-0", "xr-f1", a, base)))
	for i := 1; i <= 2; i++ {
		at := base.Add(time.Duration(i) * time.Minute)
		_, err := s.UseRefreshToken(ctx, hash(fmt.Sprintf("xr-f1-%d", i-1)), at, tok(fmt.Sprintf("f1-%d", i), "", store.Account{}, at))
		must(t, "refresh f1", err)
	}
	must(t, "sign out f1", s.RevokeRefreshFamily(ctx, hash("xr-f1-2")))
	must(t, "token f2", s.CreateRefreshToken(ctx, tok("f2", "xr-f2", a, base.Add(30*time.Second))))
	must(t, "token b", s.CreateRefreshToken(ctx, tok("b", "xr-fb", b, base.Add(time.Hour))))
	must(t, "token stranger", s.CreateRefreshToken(ctx, tok("x", "xr-fx", stranger, base.Add(time.Hour))))
	var sessions []store.AccountSession
	must(t, "each account session", s.EachAccountSession(ctx, tn.ID, a.ID, func(x store.AccountSession) error {
		sessions = append(sessions, x)
		return nil
	}))
	wantSessions := []store.AccountSession{
		{FirstTokenAt: base, LastTokenAt: base.Add(2 * time.Minute), ExpiresAt: base.Add(62 * time.Minute), Revoked: true},
		{FirstTokenAt: base.Add(30 * time.Second), LastTokenAt: base.Add(30 * time.Second), ExpiresAt: base.Add(time.Hour + 30*time.Second), Revoked: false},
	}
	if len(sessions) != len(wantSessions) {
		t.Fatalf("a's sessions = %+v, want %+v", sessions, wantSessions)
	}
	for i, x := range sessions {
		w := wantSessions[i]
		if !x.FirstTokenAt.Equal(w.FirstTokenAt) || !x.LastTokenAt.Equal(w.LastTokenAt) || !x.ExpiresAt.Equal(w.ExpiresAt) || x.Revoked != w.Revoked {
			t.Fatalf("a's session %d = %+v, want %+v", i, x, w)
		}
	}

	// Another tenant's view of a: nothing of any kind; an error of fn
	// comes back as is after one call.
	none := func(what string) func() error {
		return func() error { t.Fatalf("other tenant reads a's %s", what); return nil }
	}
	must(t, "other tenant", errors.Join(
		s.EachAppliedChange(ctx, other.ID, a.ID, func(store.AppliedChange) error { return none("applied changes")() }),
		s.EachAccountBoard(ctx, other.ID, a.ID, func(store.AccountBoard) error { return none("boards")() }),
		s.EachAccountRating(ctx, other.ID, a.ID, func(store.Rating) error { return none("ratings")() }),
		s.EachAccountSession(ctx, other.ID, a.ID, func(store.AccountSession) error { return none("sessions")() }),
		s.EachUnfinishedAccountMatch(ctx, other.ID, a.ID, func(store.AccountMatch) error { return none("unfinished matches")() }),
		s.EachAccountRosterEntry(ctx, other.ID, a.ID, func(store.RosterEntry) error { return none("rosters")() }),
	))
	for what, read := range map[string]func(count func() error) error{
		"applied changes": func(c func() error) error {
			return s.EachAppliedChange(ctx, tn.ID, a.ID, func(store.AppliedChange) error { return c() })
		},
		"boards": func(c func() error) error {
			return s.EachAccountBoard(ctx, tn.ID, a.ID, func(store.AccountBoard) error { return c() })
		},
		"sessions": func(c func() error) error {
			return s.EachAccountSession(ctx, tn.ID, a.ID, func(store.AccountSession) error { return c() })
		},
		"unfinished matches": func(c func() error) error {
			return s.EachUnfinishedAccountMatch(ctx, tn.ID, a.ID, func(store.AccountMatch) error { return c() })
		},
		"rosters": func(c func() error) error {
			return s.EachAccountRosterEntry(ctx, tn.ID, a.ID, func(store.RosterEntry) error { return c() })
		},
	} {
		n := 0
		if err := read(func() error { n++; return stop }); err != stop || n != 1 {
			t.Fatalf("%s: fn's error: err = %v after %d calls, want stop after 1", what, err, n)
		}
	}
}
