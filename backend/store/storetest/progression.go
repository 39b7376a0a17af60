package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for progression: XP, wallet, ledger and their concurrency.

func testProgression(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "prog"), mustTenant(t, s, "prog2")
	a := mustAccount(t, s, tn.ID, "dev-prog-0000000")
	c := store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "grant-1", XP: 150,
		Currency: map[string]int64{"gold": 100, "gems": 5}, Items: map[string]int64{"sword": 1}, Reason: "welcome", At: base}
	applied, err := s.ApplyChange(ctx, c)
	must(t, "apply", err)
	if !applied {
		t.Fatal("first change not applied")
	}
	applied, err = s.ApplyChange(ctx, c)
	must(t, "apply again", err)
	if applied {
		t.Fatal("same key applied twice")
	}
	p, err := s.Progression(ctx, tn.ID, a.ID)
	must(t, "progression", err)
	if p.XP != 150 || p.Currency["gold"] != 100 || p.Currency["gems"] != 5 || p.Items["sword"] != 1 {
		t.Fatalf("progression = %+v", p)
	}
	// Spending more than the balance changes nothing at all.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "spend-1", XP: 10,
		Currency: map[string]int64{"gold": -30, "gems": -6}, At: base})
	wantErr(t, "overspend", err, store.ErrInsufficient)
	applied, err = s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: "spend-1",
		Currency: map[string]int64{"gold": -30}, Items: map[string]int64{"sword": -1}, Reason: "shop", At: base.Add(time.Second)})
	must(t, "spend (key free again after the failed attempt)", err)
	if !applied {
		t.Fatal("spend not applied")
	}
	p, _ = s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 150 || p.Currency["gold"] != 70 || p.Currency["gems"] != 5 || p.Items["sword"] != 0 {
		t.Fatalf("after spend = %+v", p)
	}
	l, err := s.Ledger(ctx, tn.ID, a.ID, 10)
	must(t, "ledger", err)
	if len(l) != 3 || l[0].Currency != "gold" || l[0].Delta != -30 || l[0].Balance != 70 || l[0].Reason != "shop" || l[0].Key != "spend-1" {
		t.Fatalf("ledger = %+v", l)
	}
	// Another tenant's id: not found, nothing read.
	_, err = s.ApplyChange(ctx, store.Change{TenantID: other.ID, AccountID: a.ID, Key: "x", XP: 1, At: base})
	wantErr(t, "change in other tenant", err, store.ErrNotFound)
	if p, _ := s.Progression(ctx, other.ID, a.ID); p.XP != 0 || len(p.Currency) != 0 {
		t.Fatalf("other tenant reads progression %+v", p)
	}
	if l, _ := s.Ledger(ctx, other.ID, a.ID, 10); len(l) != 0 {
		t.Fatalf("other tenant reads ledger %+v", l)
	}
}

func testProgressionConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "progc")
	a := mustAccount(t, s, tn.ID, "dev-progc-000000")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Keys 0..9, each sent twice.
			_, err := s.ApplyChange(ctx, store.Change{TenantID: tn.ID, AccountID: a.ID, Key: fmt.Sprint("k", i%10), XP: 1,
				Currency: map[string]int64{"gold": 10}, At: base})
			if err != nil {
				t.Errorf("apply: %v", err)
			}
		}()
	}
	wg.Wait()
	p, _ := s.Progression(ctx, tn.ID, a.ID)
	if p.XP != 10 || p.Currency["gold"] != 100 {
		t.Fatalf("progression after concurrent duplicates = %+v, want xp 10 gold 100", p)
	}
}
