package backend_test

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// TestProgressionCaps: a grant that would give an account more distinct
// currencies or items than it may hold is ResourceExhausted, saying what
// to do, and changes nothing; a match result whose rules credit a currency
// past the cap applies all the same, without it, and the log names it.
func TestProgressionCaps(t *testing.T) { bothStores(t, testProgressionCaps) }

func testProgressionCaps(t *testing.T, e *env) {
	tn, admin := e.createTenant("caps")
	p1, p2 := e.account(admin, "p1"), e.account(admin, "p2")
	grant := func(key string, xp int64, currency, items map[string]int64) error {
		_, err := e.admin.GrantProgression(ctx, req(&ludusv1.GrantProgressionRequest{AccountId: p1, IdempotencyKey: key, Xp: xp,
			Currency: currency, Items: items}, admin))
		return err
	}
	fill := func(prefix string, n int, currencies bool) {
		t.Helper()
		for from := 0; from < n; from += backend.MaxMapEntries {
			m := map[string]int64{}
			for i := from; i < min(from+backend.MaxMapEntries, n); i++ {
				m[fmt.Sprintf("%s%04d", prefix, i)] = 1
			}
			var err error
			if currencies {
				err = grant(fmt.Sprint(prefix, from), 0, m, nil)
			} else {
				err = grant(fmt.Sprint(prefix, from), 0, nil, m)
			}
			if err != nil {
				t.Fatalf("fill %s %d: %v", prefix, from, err)
			}
		}
	}
	fill("c", store.MaxCurrenciesPerAccount, true)
	err := grant("over", 7, map[string]int64{"c0000": 1, "gems": 5}, nil)
	wantCode(t, err, connect.CodeResourceExhausted, "account "+p1+" holds 100 distinct currencies and this grant would add 1 more",
		"at most 100", "grant only currencies it holds", "nothing changed")
	if p := e.progression(admin, p1); p.Xp != 0 || p.Currency["c0000"] != 1 || len(p.Currency) != store.MaxCurrenciesPerAccount {
		t.Fatalf("after the refused grant: xp %d, c0000 %d, %d currencies", p.Xp, p.Currency["c0000"], len(p.Currency))
	}
	if err := grant("over", 7, map[string]int64{"c0000": 1}, nil); err != nil {
		t.Fatalf("a held currency, with the refused grant's key: %v", err)
	}
	fill("i", store.MaxItemsPerAccount, false)
	err = grant("over-items", 0, nil, map[string]int64{"sword": 1})
	wantCode(t, err, connect.CodeResourceExhausted, "holds 1000 distinct items", "at most 1000", "take away items it no longer needs")

	// Result rules credit a currency the account has no room for: the
	// result applies, the rest of it is granted, the log names what was not.
	if _, err := e.admin.SetResultRules(ctx, req(&ludusv1.SetResultRulesRequest{Rules: []*ludusv1.ResultRule{
		{Stat: "kills", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_XP, PerUnit: 10, Cap: 150},
		{Stat: "coins", Kind: ludusv1.ResultRuleKind_RESULT_RULE_KIND_CURRENCY, Target: "trophy", Cap: 20},
	}}, admin)); err != nil {
		t.Fatal(err)
	}
	cred := e.mint(tn.Id, "m-caps", "arena")
	e.roster(tn.Id, "m-caps", p1, p2)
	applied, err := backend.NewMatchReporter(e.http.Client(), e.http.URL, "m-caps", cred).ReportResult(ctx, 1, []*ludusv1.PlayerResult{
		statsOf(p1, 1, map[string]int64{"kills": 2, "coins": 3}),
		statsOf(p2, 2, map[string]int64{"kills": 1, "coins": 4}),
	})
	if err != nil || !applied {
		t.Fatalf("result: applied %v, %v", applied, err)
	}
	if p := e.progression(admin, p1); p.Xp != 27 || p.Currency["trophy"] != 0 || len(p.Currency) != store.MaxCurrenciesPerAccount {
		t.Fatalf("p1 after the result: xp %d, trophy %d, %d currencies", p.Xp, p.Currency["trophy"], len(p.Currency))
	}
	if p := e.progression(admin, p2); p.Xp != 10 || p.Currency["trophy"] != 4 {
		t.Fatalf("p2 after the result: %v", p)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "left out grants past the accounts' caps") || !strings.Contains(logs, p1+" currency trophy +3") {
		t.Fatalf("the log does not name the grant left out:\n%s", logs)
	}
}
