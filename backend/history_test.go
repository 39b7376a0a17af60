package backend_test

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

var guestNameRE = regexp.MustCompile(`^guest-[0-9a-f]{4}$`)

// report stores a final result of a new match of game "arena" (a credential
// minted for it, as a sim node does), one second after the previous one so
// that the newest-first order is the order of the calls.
func (e *env) report(tenantID, matchID string, ps ...*ludusv1.PlayerResult) time.Time {
	e.t.Helper()
	e.clock.Add(time.Second)
	cred := e.mint(tenantID, matchID, "arena")
	if _, err := e.reports.ReportMatchResult(ctx, req(&ludusv1.ReportMatchResultRequest{MatchId: matchID, Players: ps}, cred)); err != nil {
		e.t.Fatalf("ReportMatchResult(%s): %v", matchID, err)
	}
	return e.clock.Now()
}

func (e *env) myMatches(ticket string, limit int32) []*ludusv1.MyMatch {
	e.t.Helper()
	resp, err := e.prog.ListMyMatches(ctx, req(&ludusv1.ListMyMatchesRequest{Limit: limit}, ticket))
	if err != nil {
		e.t.Fatalf("ListMyMatches: %v", err)
	}
	return resp.Msg.Matches
}

func matchIDs(ms []*ludusv1.MyMatch) []string {
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.MatchId)
	}
	return ids
}

func result(id string, score int64, place, team int32) *ludusv1.PlayerResult {
	return &ludusv1.PlayerResult{AccountId: id, Score: score, Place: place, Team: team, DurationMs: 1000 * score}
}

func TestListMyMatches(t *testing.T) { bothStores(t, testListMyMatches) }

// testListMyMatches: a player sees their own finished matches only, newest
// first, with their own figures, the outcome read from places and the other
// players by name; never another account's or another tenant's matches.
func testListMyMatches(t *testing.T, e *env) {
	tn, admin := e.createTenant("hist")
	other, _ := e.createTenant("hist-other")
	alice := e.guestLogin("hist", "device-alice-0000001", "Alice")
	bob := e.guestLogin("hist", "device-bob-000000001", "Bob")
	carol := e.guestLogin("hist", "device-carol-0000001", "") // named guest-xxxx
	dave := e.guestLogin("hist-other", "device-dave-00000001", "Dave")
	if !guestNameRE.MatchString(carol.DisplayName) {
		t.Fatalf("an unnamed guest is %q", carol.DisplayName)
	}

	// A guest with no match yet: an empty list, not an error.
	if ms := e.myMatches(alice.Ticket, 0); len(ms) != 0 {
		t.Fatalf("a new guest has matches: %v", ms)
	}

	a, b, c := alice.AccountId, bob.AccountId, carol.AccountId
	m1 := &ludusv1.PlayerResult{AccountId: a, Score: 10, Place: 1, DurationMs: 60_000, Xp: 5, Stats: map[string]int64{"kills": 3, "score": 10}}
	ended1 := e.report(tn.Id, "m1", m1, result(b, 4, 2, 0))
	e.report(tn.Id, "m2-bob-carol", result(b, 7, 1, 0), result(c, 3, 2, 0))
	e.report(tn.Id, "m3", result(a, 5, 3, 0), result(b, 9, 1, 0), result(c, 6, 2, 0))
	e.report(tn.Id, "m4-draw", result(a, 8, 1, 0), result(b, 8, 1, 0))
	e.report(tn.Id, "m5-team", result(a, 2, 1, 1), result(b, 3, 1, 1), result(c, 9, 2, 2))
	e.report(tn.Id, "m6-unrated", result(a, 1, 0, 0))
	e.report(other.Id, "m-other-tenant", result(dave.AccountId, 50, 1, 0))

	ms := e.myMatches(alice.Ticket, 0)
	if got, want := matchIDs(ms), []string{"m6-unrated", "m5-team", "m4-draw", "m3", "m1"}; !slices.Equal(got, want) {
		t.Fatalf("Alice's matches = %v, want %v (never Bob and Carol's match, never another tenant's)", got, want)
	}
	outcomes := map[string]ludusv1.MatchOutcome{
		"m6-unrated": ludusv1.MatchOutcome_MATCH_OUTCOME_UNSPECIFIED,
		"m5-team":    ludusv1.MatchOutcome_MATCH_OUTCOME_WON, // a teammate shares the place
		"m4-draw":    ludusv1.MatchOutcome_MATCH_OUTCOME_DRAW,
		"m3":         ludusv1.MatchOutcome_MATCH_OUTCOME_LOST,
		"m1":         ludusv1.MatchOutcome_MATCH_OUTCOME_WON,
	}
	for _, m := range ms {
		if m.Outcome != outcomes[m.MatchId] {
			t.Errorf("%s: outcome %v, want %v", m.MatchId, m.Outcome, outcomes[m.MatchId])
		}
		if m.You.GetAccountId() != a || m.Game != "arena" {
			t.Errorf("%s: you = %v, game %q", m.MatchId, m.You, m.Game)
		}
	}

	// The oldest, in full: Alice's own figures, the others by name.
	first := ms[4]
	if !first.EndedAt.AsTime().Equal(ended1) || first.DurationMs != 60_000 {
		t.Errorf("m1 ended %v after %d ms, want %v after 60000", first.EndedAt.AsTime(), first.DurationMs, ended1)
	}
	if y := first.You; y.Score != 10 || y.Place != 1 || y.DurationMs != 60_000 || y.Stats["kills"] != 3 || y.Xp != 5 {
		t.Errorf("m1: your figures %v", y)
	}
	if len(first.Others) != 1 || first.OthersTotal != 1 {
		t.Fatalf("m1 others %v (total %d), want Bob", first.Others, first.OthersTotal)
	}
	if o := first.Others[0]; o.AccountId != b || o.DisplayName != "Bob" || o.Score != 4 || o.Place != 2 {
		t.Errorf("m1: other %v, want Bob with 4 in 2nd place", o)
	}
	// m3: the others best place first; an unnamed guest by its guest name.
	third := ms[3]
	if len(third.Others) != 2 || third.Others[0].DisplayName != "Bob" || third.Others[1].DisplayName != carol.DisplayName {
		t.Errorf("m3 others = %v, want Bob then %s", third.Others, carol.DisplayName)
	}

	// Bob sees the match Alice was not in; Dave only his tenant's match.
	if got := matchIDs(e.myMatches(bob.Ticket, 0)); !slices.Contains(got, "m2-bob-carol") || len(got) != 5 {
		t.Errorf("Bob's matches = %v", got)
	}
	if got := matchIDs(e.myMatches(dave.Ticket, 0)); !slices.Equal(got, []string{"m-other-tenant"}) {
		t.Errorf("Dave's matches = %v, want only his tenant's", got)
	}

	// Limits: 2 gives the 2 newest; over 50 or negative is refused.
	if got := matchIDs(e.myMatches(alice.Ticket, 2)); !slices.Equal(got, []string{"m6-unrated", "m5-team"}) {
		t.Errorf("limit 2 = %v", got)
	}
	for _, bad := range []int32{-1, backend.MaxMyMatches + 1} {
		_, err := e.prog.ListMyMatches(ctx, req(&ludusv1.ListMyMatchesRequest{Limit: bad}, alice.Ticket))
		wantCode(t, err, connect.CodeInvalidArgument, "limit")
	}
	// No ticket, or an API key in its place: Unauthenticated.
	_, err := e.prog.ListMyMatches(ctx, req(&ludusv1.ListMyMatchesRequest{}, ""))
	wantCode(t, err, connect.CodeUnauthenticated)
	_, err = e.prog.ListMyMatches(ctx, req(&ludusv1.ListMyMatchesRequest{}, admin))
	wantCode(t, err, connect.CodeUnauthenticated)

	// Deleting an account erases its part of the results: Alice's history
	// keeps the matches, without Bob.
	if _, err := e.admin.DeleteAccount(ctx, req(&ludusv1.DeleteAccountRequest{Id: b}, admin)); err != nil {
		t.Fatal(err)
	}
	ms = e.myMatches(alice.Ticket, 0)
	if m := ms[len(ms)-1]; m.MatchId != "m1" || len(m.Others) != 0 || m.OthersTotal != 0 {
		t.Errorf("m1 after Bob was deleted: %v, want no other player", m)
	}
}

// TestListMyMatchesBounds: the default and the most matches returned, and
// how many other players an entry names.
func TestListMyMatchesBounds(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("bounds")
	me := e.guestLogin("bounds", "device-bounds-000001", "Me")
	for i := range backend.DefaultMyMatches + 5 {
		e.report(tn.Id, fmt.Sprintf("solo-%02d", i), result(me.AccountId, int64(i), 0, 0))
	}
	if got := e.myMatches(me.Ticket, 0); len(got) != backend.DefaultMyMatches || got[0].MatchId != "solo-24" {
		t.Fatalf("limit 0: %d matches starting %v, want the %d newest", len(got), matchIDs(got[:1]), backend.DefaultMyMatches)
	}
	if got := e.myMatches(me.Ticket, backend.MaxMyMatches); len(got) != backend.DefaultMyMatches+5 {
		t.Fatalf("limit %d: %d matches, want all %d", backend.MaxMyMatches, len(got), backend.DefaultMyMatches+5)
	}

	// A crowded match: the best MaxOthersShown others are named, all counted.
	ps := []*ludusv1.PlayerResult{result(me.AccountId, 1, 20, 0)}
	for i := range 19 {
		a, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: fmt.Sprintf("p%02d", i), DisplayName: fmt.Sprintf("P%02d", i)}, admin))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, result(a.Msg.Account.Id, int64(100-i), int32(i+1), 0))
	}
	e.report(tn.Id, "crowded", ps...)
	m := e.myMatches(me.Ticket, 1)[0]
	if m.MatchId != "crowded" || len(m.Others) != backend.MaxOthersShown || m.OthersTotal != 19 {
		t.Fatalf("crowded: %s names %d others of %d, want %d of 19", m.MatchId, len(m.Others), m.OthersTotal, backend.MaxOthersShown)
	}
	for i, o := range m.Others {
		if want := fmt.Sprintf("P%02d", i); o.DisplayName != want || o.Place != int32(i+1) {
			t.Fatalf("crowded: others[%d] = %v, want %s in place %d", i, o, want, i+1)
		}
	}
	if m.Outcome != ludusv1.MatchOutcome_MATCH_OUTCOME_LOST || m.DurationMs != 100_000 {
		t.Errorf("crowded: outcome %v, duration %d ms (want lost, the longest player's 100000)", m.Outcome, m.DurationMs)
	}
}

func TestLeaderboardNames(t *testing.T) { bothStores(t, testLeaderboardNames) }

// testLeaderboardNames: leaderboard entries carry display names (the current
// one, looked up when read), a guest's guest name for an unnamed account.
func testLeaderboardNames(t *testing.T, e *env) {
	tn, admin := e.createTenant("names")
	alice := e.guestLogin("names", "device-alice-0000001", "Alice")
	bob := e.guestLogin("names", "device-bob-000000001", "Bob")
	unnamed, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: "no-name"}, admin))
	if err != nil {
		t.Fatal(err)
	}
	u := unnamed.Msg.Account.Id
	e.report(tn.Id, "m1", result(alice.AccountId, 30, 1, 0), result(bob.AccountId, 20, 2, 0), result(u, 10, 3, 0))

	want := map[string]string{alice.AccountId: "Alice", bob.AccountId: "Bob", u: unnamed.Msg.Account.DisplayName}
	if !guestNameRE.MatchString(want[u]) {
		t.Fatalf("an account created without a name is %q", want[u])
	}
	check := func(what string, es []*ludusv1.LeaderboardEntry, n int) {
		t.Helper()
		if len(es) != n {
			t.Fatalf("%s: %d entries, want %d", what, len(es), n)
		}
		for _, e := range es {
			if e.DisplayName != want[e.AccountId] {
				t.Errorf("%s: %s is named %q, want %q", what, e.AccountId, e.DisplayName, want[e.AccountId])
			}
		}
	}
	q := &ludusv1.LeaderboardRequest{Game: "arena"}
	lb, err := e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: q}, bob.Ticket))
	if err != nil {
		t.Fatal(err)
	}
	check("GetLeaderboard", lb.Msg.Entries, 3)
	around, err := e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena", Limit: 1}, AroundMe: true}, bob.Ticket))
	if err != nil {
		t.Fatal(err)
	}
	check("around me", around.Msg.Entries, 1)
	ad, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: q}, admin))
	if err != nil {
		t.Fatal(err)
	}
	check("GetAdminLeaderboard", ad.Msg.Entries, 3)

	// A rename shows at once: names are read with the board, not stored in it.
	e.guestLogin("names", "device-alice-0000001", "Alicia")
	want[alice.AccountId] = "Alicia"
	lb, err = e.prog.GetLeaderboard(ctx, req(&ludusv1.GetLeaderboardRequest{Query: q}, bob.Ticket))
	if err != nil {
		t.Fatal(err)
	}
	check("after a rename", lb.Msg.Entries, 3)
}
