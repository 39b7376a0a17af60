package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"ludus.dev/ludus/backend/store"
)

// Backends of their own (a store each, as replicas have) add new
// currencies to one account at once, each one short of the cap: exactly
// one grant or report fits. Each of them locks the account before it
// counts, so one counts after the other has committed.
func TestCapsAcrossStores(t *testing.T) {
	ctx := context.Background()
	s1, dsn := openFreshDSN(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s1.CreateTenant(ctx, store.Tenant{ID: "t_g", Slug: "g", Name: "G", CreatedAt: t0}))
	stores := []*Store{s1}
	for range 3 {
		s, err := Open(ctx, dsn)
		must(err)
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	for round := range 5 {
		acc := fmt.Sprint("a_", round)
		must(s1.CreateAccount(ctx, newAccount(acc, "t_g", fmt.Sprintf("device-caps-%05d", round))))
		for from := 0; from < store.MaxCurrenciesPerAccount-1; from += 64 {
			m := map[string]int64{}
			for i := from; i < min(from+64, store.MaxCurrenciesPerAccount-1); i++ {
				m[fmt.Sprintf("c%03d", i)] = 1
			}
			_, err := s1.ApplyChange(ctx, store.Change{TenantID: "t_g", AccountID: acc, Key: fmt.Sprint("fill", from), Currency: m, At: t0})
			must(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted, skipped := 0, 0
		for i, s := range stores {
			for j := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("new-%d-%d", i, j)
					if j%2 == 0 {
						_, err := s.ApplyChange(ctx, store.Change{TenantID: "t_g", AccountID: acc, Key: name, Currency: map[string]int64{name: 1}, At: t0})
						mu.Lock()
						defer mu.Unlock()
						if err == nil {
							granted++
						} else if !errors.Is(err, store.ErrLimit) {
							t.Errorf("grant: %v", err)
						}
						return
					}
					mid := fmt.Sprintf("m-%d-%s", round, name)
					must(s.CreateMatch(ctx, store.Match{TenantID: "t_g", ID: mid, Game: "g", CredentialHash: []byte(mid), CreatedAt: t0, ExpiresAt: t0}))
					var left []store.SkippedGrant
					_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: "t_g", MatchID: mid, Final: true, At: t0, Skipped: &left,
						Players: []store.PlayerReport{{AccountID: acc, Currency: map[string]int64{name: 1}}}})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("report: %v", err)
					}
					if len(left) == 0 {
						granted++
					} else {
						skipped++
					}
				}()
			}
		}
		wg.Wait()
		p, err := s1.Progression(ctx, "t_g", acc)
		must(err)
		if granted != 1 || len(p.Currency) != store.MaxCurrenciesPerAccount {
			t.Fatalf("round %d: %d new currencies fit (%d reports left theirs out), the account holds %d", round, granted, skipped, len(p.Currency))
		}
	}
}
