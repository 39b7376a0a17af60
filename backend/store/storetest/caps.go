package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for the caps on an account's distinct currencies and items.

// fill grants an account n distinct keys of a kind ("c%03d" currencies or
// "i%04d" items), 64 a change.
func fill(t *testing.T, s store.Store, tenantID, accountID string, currencies bool, n int) {
	t.Helper()
	for from := 0; from < n; from += 64 {
		m := map[string]int64{}
		for i := from; i < min(from+64, n); i++ {
			if currencies {
				m[fmt.Sprintf("c%03d", i)] = 1
			} else {
				m[fmt.Sprintf("i%04d", i)] = 1
			}
		}
		c := store.Change{TenantID: tenantID, AccountID: accountID, Key: fmt.Sprintf("fill-%v-%d", currencies, from), At: base}
		if currencies {
			c.Currency = m
		} else {
			c.Items = m
		}
		_, err := s.ApplyChange(context.Background(), c)
		must(t, "fill", err)
	}
}

func wantLimit(t *testing.T, what string, err error, kind string, held, added int) {
	t.Helper()
	var le *store.LimitError
	if !errors.Is(err, store.ErrLimit) || !errors.As(err, &le) {
		t.Fatalf("%s: err = %v, want a LimitError", what, err)
	}
	if le.What != kind || le.Held != held || le.New != added {
		t.Fatalf("%s: %+v, want %s held %d new %d", what, *le, kind, held, added)
	}
}

func testProgressionCaps(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "caps")
	a := mustAccount(t, s, tn.ID, "dev-caps-a000000")
	fill(t, s, tn.ID, a.ID, true, store.MaxCurrenciesPerAccount)

	// A new currency past the cap: refused whole, the key free again.
	_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k", XP: 5,
		Currency: map[string]int64{"c000": 1, "new1": 1, "new2": 1}, At: base})
	wantLimit(t, "a new currency past the cap", err, "currencies", store.MaxCurrenciesPerAccount, 2)
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 0 || p.Currency["c000"] != 1 || len(p.Currency) != store.MaxCurrenciesPerAccount {
		t.Fatalf("after the refused change: %+v", p)
	}
	// Held currencies (also spent to zero: it stays held) are fine, so is
	// taking a new one away (refused as insufficient, not as a limit).
	applied, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k", XP: 5,
		Currency: map[string]int64{"c000": 1, "c001": -1}, At: base})
	must(t, "held currencies", err)
	if !applied {
		t.Fatal("the key was not free again")
	}
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k2", Currency: map[string]int64{"new1": 1}, At: base})
	wantLimit(t, "a currency at zero still counts", err, "currencies", store.MaxCurrenciesPerAccount, 1)
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k2", Currency: map[string]int64{"new1": -1}, At: base})
	wantErr(t, "taking a currency never held", err, store.ErrInsufficient)

	// Items: an item at zero is no longer held, and makes room.
	fill(t, s, tn.ID, a.ID, false, store.MaxItemsPerAccount)
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k3", Items: map[string]int64{"sword": 1}, At: base})
	wantLimit(t, "a new item past the cap", err, "items", store.MaxItemsPerAccount, 1)
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k3", Items: map[string]int64{"i0000": -1}, At: base})
	must(t, "take an item away", err)
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k4", Items: map[string]int64{"sword": 2, "i0001": 1}, At: base})
	must(t, "a new item in the room made", err)
	p, _ = s.Progression(ctx, tn.ID, a.ID)
	if _, ok := p.Items["i0000"]; ok || p.Items["sword"] != 2 || p.Items["i0001"] != 2 || len(p.Items) != store.MaxItemsPerAccount {
		t.Fatalf("items: %d, sword %d, i0000 %v", len(p.Items), p.Items["sword"], p.Items["i0000"])
	}
	// Gone means gone: the item can be granted again, not taken.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "k5", Items: map[string]int64{"i0000": -1}, At: base})
	wantErr(t, "an item at zero taken", err, store.ErrInsufficient)

	// Concurrent changes adding one new currency each to an account one
	// short of the cap: exactly one fits.
	b := mustAccount(t, s, tn.ID, "dev-caps-b000000")
	fill(t, s, tn.ID, b.ID, true, store.MaxCurrenciesPerAccount-1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, limited := 0, 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: b.ID, Key: fmt.Sprint("race", i),
				Currency: map[string]int64{fmt.Sprint("race", i): 1}, At: base})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrLimit):
				limited++
			default:
				t.Errorf("race %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if p, _ := s.Progression(ctx, tn.ID, b.ID); ok != 1 || limited != 7 || len(p.Currency) != store.MaxCurrenciesPerAccount {
		t.Fatalf("racing new currencies: %d applied, %d limited, %d held", ok, limited, len(p.Currency))
	}
}

// A match report never fails for the caps: the keys that do not fit are
// left out, in name order, and reported; the rest applies, once; a later
// report of the match grants what was left out if there is room then.
func testMatchReportCaps(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "mcaps")
	a := mustAccount(t, s, tn.ID, "dev-mcaps-a00000")
	b := mustAccount(t, s, tn.ID, "dev-mcaps-b00000")
	fill(t, s, tn.ID, a.ID, true, store.MaxCurrenciesPerAccount-1)
	fill(t, s, tn.ID, a.ID, false, store.MaxItemsPerAccount-1)
	mustMatch(t, s, tn.ID, "m", "arena")

	report := func(seq int64, final bool, n int64) store.MatchReport {
		return store.MatchReport{TenantID: tn.ID, MatchID: "m", Seq: seq, Final: final, At: base.Add(time.Duration(seq) * time.Second),
			Players: []store.PlayerReport{
				{AccountID: b.ID, Score: n, Currency: map[string]int64{"z3": n, "z1": n}, Items: map[string]int64{"n2": n, "n1": n}},
				{AccountID: a.ID, Score: n, XP: n, Currency: map[string]int64{"z3": n, "c000": n, "z2": n, "z1": n},
					Items: map[string]int64{"n2": n, "n1": n, "i0000": n}},
			}}
	}
	var skipped []store.SkippedGrant
	r := report(1, false, 10)
	r.Skipped = &skipped
	applied, err := s.ApplyMatchReport(ctx, r)
	must(t, "interim report past the caps", err)
	if !applied {
		t.Fatal("interim report not applied")
	}
	want := []store.SkippedGrant{
		{AccountID: a.ID, Kind: store.RuleCurrency, Name: "z2", Amount: 10},
		{AccountID: a.ID, Kind: store.RuleCurrency, Name: "z3", Amount: 10},
		{AccountID: a.ID, Kind: store.RuleItem, Name: "n2", Amount: 10},
	}
	if !slices.Equal(skipped, want) {
		t.Fatalf("skipped = %+v, want %+v", skipped, want)
	}
	pa, _ := s.Progression(ctx, tn.ID, a.ID)
	pb, _ := s.Progression(ctx, tn.ID, b.ID)
	if pa.XP != 10 || pa.Currency["c000"] != 11 || pa.Currency["z1"] != 10 || pa.Items["n1"] != 10 || pa.Items["i0000"] != 11 ||
		len(pa.Currency) != store.MaxCurrenciesPerAccount || len(pa.Items) != store.MaxItemsPerAccount {
		t.Fatalf("a after the interim report: xp %d, %d currencies, %d items", pa.XP, len(pa.Currency), len(pa.Items))
	}
	if pb.Currency["z1"] != 10 || pb.Currency["z3"] != 10 || pb.Items["n2"] != 10 {
		t.Fatalf("b after the interim report: %+v", pb)
	}

	// An item taken away to zero makes room: the final report grants n2,
	// whole, and still leaves out the currencies.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "use", Items: map[string]int64{"i0001": -1}, At: base})
	must(t, "use an item", err)
	skipped = nil
	r = report(2, true, 12)
	r.Skipped = &skipped
	_, err = s.ApplyMatchReport(ctx, r)
	must(t, "final report", err)
	want = []store.SkippedGrant{
		{AccountID: a.ID, Kind: store.RuleCurrency, Name: "z2", Amount: 12},
		{AccountID: a.ID, Kind: store.RuleCurrency, Name: "z3", Amount: 12},
	}
	if !slices.Equal(skipped, want) {
		t.Fatalf("final report skipped = %+v, want %+v", skipped, want)
	}
	pa, _ = s.Progression(ctx, tn.ID, a.ID)
	if pa.XP != 12 || pa.Currency["z1"] != 12 || pa.Items["n1"] != 12 || pa.Items["n2"] != 12 || pa.Items["i0000"] != 13 {
		t.Fatalf("a after the final report: xp %d, z1 %d, n1 %d, n2 %d", pa.XP, pa.Currency["z1"], pa.Items["n1"], pa.Items["n2"])
	}
	// The stored result holds what the match granted.
	res, err := s.MatchResult(ctx, tn.ID, "m")
	must(t, "result", err)
	for _, p := range res.Players {
		if p.AccountID == a.ID && (p.Currency["z1"] != 12 || p.Currency["c000"] != 12 || len(p.Currency) != 2 || p.Items["n2"] != 12) {
			t.Fatalf("a's result = %+v", p)
		}
	}
	// Applied once: the same final report again grants and skips nothing.
	skipped = []store.SkippedGrant{{Name: "stale"}}
	applied, err = s.ApplyMatchReport(ctx, r)
	must(t, "final report again", err)
	if applied || len(skipped) != 0 {
		t.Fatalf("final report again: applied %v, skipped %+v", applied, skipped)
	}
}

// Concurrent results of matches sharing a player who holds all but a few
// keys: every result applies, and the player never holds more than the cap.
func testMatchReportCapsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "mcapc")
	a := mustAccount(t, s, tn.ID, "dev-mcapc-a00000")
	fill(t, s, tn.ID, a.ID, true, store.MaxCurrenciesPerAccount-3)
	const matches = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var left []string
	for i := range matches {
		mid := fmt.Sprint("m", i)
		mustMatch(t, s, tn.ID, mid, "arena")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var skipped []store.SkippedGrant
			applied, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: mid, Final: true, At: base, Skipped: &skipped,
				Players: []store.PlayerReport{{AccountID: a.ID, Currency: map[string]int64{"gold": 1, fmt.Sprintf("x%02d", i): 1}}}})
			if err != nil || !applied {
				t.Errorf("%s: applied %v, %v", mid, applied, err)
			}
			mu.Lock()
			for _, g := range skipped {
				left = append(left, g.Name)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	// gold and two of the x's fit; the other 14 were left out.
	if len(p.Currency) != store.MaxCurrenciesPerAccount || p.Currency["gold"] != matches || len(left) != matches-2 {
		t.Fatalf("%d currencies, gold %d, %d left out", len(p.Currency), p.Currency["gold"], len(left))
	}
}
