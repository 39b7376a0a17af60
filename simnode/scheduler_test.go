package simnode

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSchedulerFairByTenant: one worker, tenant "many" with six always-due
// games, tenant "one" with a single game whose ticks cost the same, every game
// due again as soon as it ticked (an overloaded node). Fair queuing by tenant
// gives "one" about half the grants, not a seventh.
func TestSchedulerFairByTenant(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScheduler(1)
	go s.run(ctx)
	var grants [2]atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	play := func(tenant int, name string) {
		tk := s.newTicket(name)
		s.register(ctx, tk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.unregister(ctx, tk)
			for total.Load() < 400 {
				if !s.acquire(ctx, tk) {
					return
				}
				grants[tenant].Add(1)
				total.Add(1)
				start := time.Now()
				time.Sleep(200 * time.Microsecond) // the tick's work
				s.release(ctx, tk, time.Since(start))
			}
		}()
	}
	for range 6 {
		play(0, "many")
	}
	play(1, "one")
	wg.Wait()
	many, one := grants[0].Load(), grants[1].Load()
	t.Logf("grants: many (6 games) %d, one (1 game) %d", many, one)
	if frac := float64(one) / float64(many+one); frac < 0.4 || frac > 0.6 {
		t.Errorf("tenant with one game got %.0f%% of the grants; want about half", frac*100)
	}
}

// TestSchedulerTenantCap: with two workers, a tenant holding one slot cannot
// take the second while another tenant has games; alone on the node it can.
func TestSchedulerTenantCap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScheduler(2)
	go s.run(ctx)
	a1, a2, b := s.newTicket("a"), s.newTicket("a"), s.newTicket("b")
	s.register(ctx, a1)
	s.register(ctx, a2)
	if !s.acquire(ctx, a1) {
		t.Fatal("no slot")
	}
	// Alone on the node, "a" may use both workers.
	if !s.acquire(ctx, a2) {
		t.Fatal("no second slot")
	}
	s.release(ctx, a2, time.Millisecond)
	s.register(ctx, b)
	got := make(chan bool, 1)
	go func() { got <- s.acquire(ctx, a2) }()
	select {
	case <-got:
		t.Fatal("tenant a got a second slot while tenant b has a game")
	case <-time.After(50 * time.Millisecond):
	}
	if !s.acquire(ctx, b) {
		t.Fatal("tenant b got no slot")
	}
	s.release(ctx, a1, time.Millisecond)
	select {
	case <-got: // a2 runs once a1 is back
	case <-time.After(5 * time.Second):
		t.Fatal("a2 never got a slot")
	}
}
