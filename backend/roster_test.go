package backend_test

import (
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func (e *env) account(adminKey, customID string) string {
	e.t.Helper()
	a, err := e.admin.CreateAccount(ctx, req(&ludusv1.CreateAccountRequest{CustomId: customID}, adminKey))
	if err != nil {
		e.t.Fatalf("CreateAccount(%s): %v", customID, err)
	}
	return a.Msg.Account.Id
}

func (e *env) roster(tenantID, matchID string, accountIDs ...string) {
	e.t.Helper()
	if err := backend.NewRosterClient(e.http.Client(), e.http.URL, clusterToken).AddPlayers(ctx, tenantID, matchID, accountIDs...); err != nil {
		e.t.Fatalf("AddPlayers(%s): %v", matchID, err)
	}
}

func players(xp int64, ids ...string) []*ludusv1.PlayerResult {
	var ps []*ludusv1.PlayerResult
	for _, id := range ids {
		ps = append(ps, &ludusv1.PlayerResult{AccountId: id, Score: xp, Xp: xp, Currency: map[string]int64{"gold": xp}})
	}
	return ps
}

func (e *env) wantXP(adminKey, accountID string, xp int64) {
	e.t.Helper()
	if p := e.progression(adminKey, accountID); p.Xp != xp || p.Currency["gold"] != xp {
		e.t.Fatalf("progression of %s = %v, want %d xp and gold", accountID, p, xp)
	}
}

// testRoster: once a match has a roster, its credential credits only the
// accounts on it; a report naming anyone else applies nothing at all.
func testRoster(t *testing.T, e *env) {
	tn, admin := e.createTenant("ros")
	p1, p2, outsider := e.account(admin, "p1"), e.account(admin, "p2"), e.account(admin, "outsider")
	cred := e.mint(tn.Id, "m-1", "arena")
	e.roster(tn.Id, "m-1", p1)
	e.roster(tn.Id, "m-1", p2, p1) // a second join, and p1 again: idempotent
	rep := backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)

	_, err := rep.ReportProgress(ctx, 1, players(10, p1, outsider))
	wantCode(t, err, connect.CodePermissionDenied, "account "+outsider+" is not a player of match", "nothing of this report was applied")
	_, err = rep.ReportResult(ctx, 2, players(20, outsider, p2))
	wantCode(t, err, connect.CodePermissionDenied, outsider)
	for _, id := range []string{p1, p2, outsider} {
		e.wantXP(admin, id, 0)
	}
	rs, err := e.admin.ListMatchResults(ctx, req(&ludusv1.ListMatchResultsRequest{}, admin))
	if err != nil || len(rs.Msg.Results) != 0 {
		t.Fatalf("a refused final result was stored: %v, %v", rs, err)
	}

	// The rostered players, credited exactly once.
	if ok, err := rep.ReportProgress(ctx, 3, players(10, p1)); err != nil || !ok {
		t.Fatalf("progress of a rostered player: %v, %v", ok, err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := rep.ReportResult(ctx, 4, players(30, p1, p2)); err != nil || ok != want {
			t.Fatalf("final #%d: applied %v, %v", i, ok, err)
		}
	}
	e.wantXP(admin, p1, 30)
	e.wantXP(admin, p2, 30)
	e.wantXP(admin, outsider, 0)
	// The roster closes with the match.
	_, err = e.modules.AddMatchPlayers(ctx, req(&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-1", AccountIds: []string{outsider}}, clusterToken))
	wantCode(t, err, connect.CodeFailedPrecondition, "ended")

	// Bad AddMatchPlayers calls add nobody.
	e.mint(tn.Id, "m-2", "arena")
	other, adminB := e.createTenant("ros-b")
	stranger := e.account(adminB, "stranger")
	e.mint(other.Id, "m-b", "arena")
	for name, c := range map[string]struct {
		msg  *clusterv1.AddMatchPlayersRequest
		code connect.Code
	}{
		"unknown match":            {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-nope", AccountIds: []string{p1}}, connect.CodeNotFound},
		"another tenant's match":   {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-b", AccountIds: []string{p1}}, connect.CodeNotFound},
		"another tenant's account": {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2", AccountIds: []string{p1, stranger}}, connect.CodeNotFound},
		"unknown account":          {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2", AccountIds: []string{p1, "a_nobody"}}, connect.CodeNotFound},
		"no accounts":              {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2"}, connect.CodeInvalidArgument},
		"an account twice":         {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2", AccountIds: []string{p1, p1}}, connect.CodeInvalidArgument},
		"malformed account":        {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2", AccountIds: []string{"A_BAD'"}}, connect.CodeInvalidArgument},
		"malformed match":          {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m/2", AccountIds: []string{p1}}, connect.CodeInvalidArgument},
		"no tenant":                {&clusterv1.AddMatchPlayersRequest{MatchId: "m-2", AccountIds: []string{p1}}, connect.CodeInvalidArgument},
		"too many accounts":        {&clusterv1.AddMatchPlayersRequest{TenantId: tn.Id, MatchId: "m-2", AccountIds: make([]string, backend.MaxPlayers+1)}, connect.CodeInvalidArgument},
	} {
		_, err := e.modules.AddMatchPlayers(ctx, req(c.msg, clusterToken))
		if connect.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %v", name, err, c.code)
		}
	}
	if r, err := e.store.MatchRoster(ctx, tn.Id, "m-2"); err != nil || len(r) != 0 {
		t.Fatalf("roster of m-2 after refused calls: %v, %v", r, err)
	}
}

func TestRoster(t *testing.T) { bothStores(t, testRoster) }

// TestMatchCredentialBinding: a match credential reports its own match of
// its own tenant only, whatever match id or accounts the report names.
func TestMatchCredentialBinding(t *testing.T) {
	e := newEnv(t)
	ta, adminA := e.createTenant("bind-a")
	tb, adminB := e.createTenant("bind-b")
	pa, pb := e.account(adminA, "pa"), e.account(adminB, "pb")
	// The same match id in both tenants, each with its own roster.
	credA := e.mint(ta.Id, "m-same", "arena")
	credB := e.mint(tb.Id, "m-same", "arena")
	e.roster(ta.Id, "m-same", pa)
	e.roster(tb.Id, "m-same", pb)
	e.mint(ta.Id, "m-other", "arena")
	e.roster(ta.Id, "m-other", pa)
	e.mint(tb.Id, "m-b-only", "arena")

	// Tenant A's credential naming tenant B's player (B's match has the same id).
	_, err := e.reports.ReportMatchResult(ctx, req(&ludusv1.ReportMatchResultRequest{MatchId: "m-same", Players: players(50, pb)}, credA))
	wantCode(t, err, connect.CodePermissionDenied, pb)
	// Another match of its tenant, and a match of the other tenant only.
	_, err = e.reports.ReportMatchResult(ctx, req(&ludusv1.ReportMatchResultRequest{MatchId: "m-other", Players: players(50, pa)}, credA))
	wantCode(t, err, connect.CodePermissionDenied, "another match")
	_, err = e.reports.ReportProgress(ctx, req(&ludusv1.ReportProgressRequest{MatchId: "m-b-only", Seq: 1, Players: players(50, pb)}, credA))
	wantCode(t, err, connect.CodePermissionDenied, "another match")
	e.wantXP(adminA, pa, 0)
	e.wantXP(adminB, pb, 0)

	// Each credential still reports its own match, for its own tenant and game.
	for _, c := range []struct{ cred, id string }{{credA, pa}, {credB, pb}} {
		if _, err := e.reports.ReportMatchResult(ctx, req(&ludusv1.ReportMatchResultRequest{MatchId: "m-same", Players: players(7, c.id)}, c.cred)); err != nil {
			t.Fatal(err)
		}
	}
	e.wantXP(adminA, pa, 7)
	e.wantXP(adminB, pb, 7)
	for _, c := range []struct{ admin, id string }{{adminA, pa}, {adminB, pb}} {
		lb, err := e.admin.GetAdminLeaderboard(ctx, req(&ludusv1.GetAdminLeaderboardRequest{Query: &ludusv1.LeaderboardRequest{Game: "arena"}}, c.admin))
		if err != nil || len(lb.Msg.Entries) != 1 || lb.Msg.Entries[0].AccountId != c.id {
			t.Fatalf("leaderboard: %v, %v", lb, err)
		}
	}
}

// TestRequireRoster: without Config.RequireRoster a match nobody put on a
// roster credits any account of its tenant (the gateways of before); with it,
// no one.
func TestRequireRoster(t *testing.T) {
	for _, require := range []bool{false, true} {
		e := newEnv(t, func(c *backend.Config) { c.RequireRoster = require })
		tn, admin := e.createTenant("req")
		p := e.account(admin, "p")
		cred := e.mint(tn.Id, "m-1", "arena")
		rep := backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-1", cred)
		if ok, err := rep.ReportProgress(ctx, 1, nil); err != nil || !ok {
			t.Fatalf("require %v: a report naming no one: %v, %v", require, ok, err)
		}
		_, err := rep.ReportResult(ctx, 2, players(5, p))
		if require {
			wantCode(t, err, connect.CodePermissionDenied, p)
			e.wantXP(admin, p, 0)
			e.roster(tn.Id, "m-1", p)
			if _, err := rep.ReportResult(ctx, 3, players(5, p)); err != nil {
				t.Fatalf("require: after AddMatchPlayers: %v", err)
			}
		} else if err != nil {
			t.Fatalf("no roster, not required: %v", err)
		}
		e.wantXP(admin, p, 5)
	}
}
