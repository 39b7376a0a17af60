package backend_test

import (
	"encoding/json"
	"maps"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// statsOf is a module's per-player result fields as the sim node passes them.
func statsOf(id string, place int32, stats map[string]int64) *ludusv1.PlayerResult {
	return &ludusv1.PlayerResult{AccountId: id, Score: stats["score"], Stats: stats, Place: place}
}

var testRules = []*ludusv1.ResultRule{
	{Stat: "kills", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_XP, PerUnit: 10, Cap: 150},
	{Game: "arena", Stat: "coins", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY, Target: "gold", Cap: 20},
	{Stat: "crates", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_ITEM, Target: "crate", Cap: 2},
	{Game: "other", Stat: "kills", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY, Target: "gems", Cap: 100}, // not this game
	{Stat: "kills", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_LEADERBOARD},
	{Stat: "win", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_LEADERBOARD},
}

// testResultsThroughRules: a module's stats reach the stored result, the
// webhook and, through the tenant's rules, XP, wallet, inventory, a stat
// leaderboard and ratings, exactly once across duplicated and out-of-order
// reports and a final report retried after a restart; caps hold.
func testResultsThroughRules(t *testing.T, e *env) {
	tn, admin := e.createTenant("rules")
	p1, p2 := e.account(admin, "p1"), e.account(admin, "p2")
	if _, err := e.admin.SetResultRules(ctx, req(&ludusv1.SetResultRulesRequest{Rules: testRules}, admin)); err != nil {
		t.Fatal(err)
	}
	got, err := e.admin.GetResultRules(ctx, req(&ludusv1.GetResultRulesRequest{}, admin))
	if err != nil || len(got.Msg.Rules) != len(testRules) || got.Msg.Rules[1].PerUnit != 1 || got.Msg.Rules[4].Kind != ludusv1.ResultRuleKind_RESULT_RULE_KIND_LEADERBOARD {
		t.Fatalf("GetResultRules = %v, %v", got, err)
	}
	if _, err := e.admin.SetWebhook(ctx, req(&ludusv1.SetWebhookRequest{Url: "https://example.com/hook"}, admin)); err != nil {
		t.Fatal(err)
	}
	cred := e.mint(tn.Id, "m-1", "arena")
	e.roster(tn.Id, "m-1", p1, p2)
	rep := func() *backend.MatchReporter {
		return backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)
	}
	progress := func(seq int64, want bool, ps ...*ludusv1.PlayerResult) {
		t.Helper()
		if ok, err := rep().ReportProgress(ctx, seq, ps); err != nil || ok != want {
			t.Fatalf("progress %d: applied %v, %v; want %v", seq, ok, err, want)
		}
	}
	want := func(id string, xp, gold, crates int64) {
		t.Helper()
		p := e.progression(admin, id)
		if p.Xp != xp || p.Currency["gold"] != gold || p.Items["crate"] != crates || p.Currency["gems"] != 0 {
			t.Fatalf("progression of %s = %v; want xp %d, gold %d, crates %d", id, p, xp, gold, crates)
		}
	}

	progress(5, true, statsOf(p1, 0, map[string]int64{"kills": 3, "coins": 5}))
	want(p1, 30, 5, 0)
	progress(5, false, statsOf(p1, 0, map[string]int64{"kills": 3, "coins": 5}))   // duplicate
	progress(4, false, statsOf(p1, 0, map[string]int64{"kills": 9, "coins": 9}))   // late, older
	progress(10, true, statsOf(p1, 0, map[string]int64{"kills": 10, "coins": 30})) // gold capped at 20
	want(p1, 100, 20, 0)

	final := []*ludusv1.PlayerResult{
		statsOf(p1, 1, map[string]int64{"score": 20, "kills": 20, "deaths": 2, "coins": 30, "crates": 5}),
		statsOf(p2, 2, map[string]int64{"score": 1, "kills": 1, "deaths": 20}),
	}
	if ok, err := rep().ReportResult(ctx, 20, final); err != nil || !ok {
		t.Fatalf("final: %v, %v", ok, err)
	}
	check := func() {
		t.Helper()
		want(p1, 150, 20, 2) // 20 kills × 10 capped at 150; 5 crates capped at 2
		want(p2, 10, 0, 0)
		rs, err := e.admin.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{AccountId: p1}, admin))
		if err != nil || len(rs.Msg.Results) != 1 {
			t.Fatalf("results: %v, %v", rs, err)
		}
		for _, p := range rs.Msg.Results[0].Players {
			if p.AccountId == p1 && (!maps.Equal(p.Stats, final[0].Stats) || p.Xp != 150 || p.Place != 1 || p.Score != 20) {
				t.Errorf("stored result of p1 = %v", p)
			}
		}
		lb, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{
			Game: "arena", Stat: "kills", Order: ludusv1.LeaderboardOrder_LEADERBOARD_ORDER_SUM}}, admin))
		if err != nil || len(lb.Msg.Entries) != 2 || lb.Msg.Entries[0].AccountId != p1 || lb.Msg.Entries[0].Sum != 20 || lb.Msg.Entries[0].Matches != 1 {
			t.Fatalf("kills board = %v, %v", lb, err)
		}
		wins, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{
			Game: "arena", Stat: "win", Order: ludusv1.LeaderboardOrder_LEADERBOARD_ORDER_SUM}}, admin))
		if err != nil || len(wins.Msg.Entries) != 2 || wins.Msg.Entries[0].AccountId != p1 || wins.Msg.Entries[0].Sum != 1 || wins.Msg.Entries[1].Sum != 0 {
			t.Fatalf("win board = %v, %v", wins, err)
		}
		r1, err1 := e.admin.GetRating(ctx, req(&ludusv1.GetRatingRequest{Mode: "arena", AccountId: p1}, admin))
		r2, err2 := e.admin.GetRating(ctx, req(&ludusv1.GetRatingRequest{Mode: "arena", AccountId: p2}, admin))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		w, l := r1.Msg.Rating, r2.Msg.Rating
		if w.Rating <= 1500 || l.Rating >= 1500 || w.Matches != 1 || l.Matches != 1 || w.Rd >= 350 || w.UpdatedAt == nil {
			t.Fatalf("ratings: winner %v, loser %v", w, l)
		}
	}
	check()
	// Retried after a restart of the backend: nothing twice.
	e.restart()
	if ok, err := rep().ReportResult(ctx, 20, final); err != nil || ok {
		t.Fatalf("final after restart: applied %v, %v", ok, err)
	}
	check()

	ds, err := e.store.ListDeliveries(ctx, tn.Id, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries: %v, %v", ds, err)
	}
	var ev backend.WebhookEvent
	if err := json.Unmarshal(ds[0].Payload, &ev); err != nil {
		t.Fatal(err)
	}
	for _, p := range ev.Players {
		if p.AccountID == p1 && (!maps.Equal(p.Stats, final[0].Stats) || p.XP != 150 || p.Place != 1 || p.Items["crate"] != 2) {
			t.Errorf("webhook player %+v", p)
		}
	}

	// A never-rated account reads as new.
	p3 := e.account(admin, "p3")
	r, err := e.admin.GetRating(ctx, req(&ludusv1.GetRatingRequest{Mode: "arena", AccountId: p3}, admin))
	if err != nil || r.Msg.Rating.Rating != 1500 || r.Msg.Rating.Rd != 350 || r.Msg.Rating.Matches != 0 {
		t.Fatalf("new player's rating: %v, %v", r, err)
	}
}

func TestResultsThroughRules(t *testing.T) { bothStores(t, testResultsThroughRules) }

func TestBadResultRulesRefused(t *testing.T) {
	e := newEnv(t)
	_, admin := e.createTenant("badrules")
	xp := ludusv1.ResultRuleKind_RESULT_RULE_KIND_XP
	cur := ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY
	board := ludusv1.ResultRuleKind_RESULT_RULE_KIND_LEADERBOARD
	many := make([]*ludusv1.ResultRule, backend.MaxResultRules+1)
	for i := range many {
		many[i] = &ludusv1.ResultRule{Stat: "kills", Kind: xp, Cap: 1}
	}
	for _, tc := range []struct {
		rules []*ludusv1.ResultRule
		msg   string
	}{
		{[]*ludusv1.ResultRule{{Stat: "kills", Cap: 1}}, "rules[0]: kind must be"},
		{[]*ludusv1.ResultRule{{Stat: "Kills", Kind: xp, Cap: 1}}, "rules[0]: stat must match"},
		{[]*ludusv1.ResultRule{{Stat: "", Kind: xp, Cap: 1}}, "stat must match"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: xp}}, "cap (the most the rule credits one player in one match) must be 1..1000000000, got 0"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: xp, Cap: 1, PerUnit: -1}}, "per_unit must be"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: xp, Cap: backend.MaxRuleCap + 1}}, "cap"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: cur, Cap: 1}}, "a currency rule needs a target"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: xp, Cap: 1, Target: "gold"}}, "a xp rule has no target"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: board, Cap: 5}}, "a leaderboard rule has no per_unit or cap"},
		{[]*ludusv1.ResultRule{{Stat: "kills", Kind: board}, {Stat: "kills", Kind: board}}, "rules[1]: a second leaderboard rule"},
		{[]*ludusv1.ResultRule{{Game: "Bad Game", Stat: "kills", Kind: xp, Cap: 1}}, "rules[0]: game:"},
		{many, "at most 64 rules"},
	} {
		_, err := e.admin.SetResultRules(ctx, req(&ludusv1.SetResultRulesRequest{Rules: tc.rules}, admin))
		wantCode(t, err, connect.CodeInvalidArgument, tc.msg)
	}
	if got, err := e.admin.GetResultRules(ctx, req(&ludusv1.GetResultRulesRequest{}, admin)); err != nil || len(got.Msg.Rules) != 0 {
		t.Fatalf("a refused rule was stored: %v, %v", got, err)
	}
}

func TestBadStatsRefused(t *testing.T) {
	e := newEnv(t)
	tn, admin := e.createTenant("badstats")
	p1 := e.account(admin, "p1")
	cred := e.mint(tn.Id, "m-1", "arena")
	rep := backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)
	tooMany := map[string]int64{}
	for i := range backend.MaxStats + 1 {
		tooMany[string(rune('a'+i%26))+string(rune('a'+i/26))] = 1
	}
	for _, tc := range []struct {
		p   *ludusv1.PlayerResult
		msg string
	}{
		{&ludusv1.PlayerResult{AccountId: p1, Stats: map[string]int64{"Kills": 1}}, "stat names must match"},
		{&ludusv1.PlayerResult{AccountId: p1, Stats: map[string]int64{"kills": backend.MaxDelta + 1}}, "out of range"},
		{&ludusv1.PlayerResult{AccountId: p1, Stats: tooMany}, "at most 64"},
		{&ludusv1.PlayerResult{AccountId: p1, Place: -1}, "place and team"},
		{&ludusv1.PlayerResult{AccountId: p1, Team: backend.MaxPlace + 1}, "place and team"},
	} {
		_, err := rep.ReportProgress(ctx, 1, []*ludusv1.PlayerResult{tc.p})
		wantCode(t, err, connect.CodeInvalidArgument, tc.msg)
	}
}
