package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Cases for match rosters: the accounts a match's reports may credit.

func wantRoster(t *testing.T, s store.Store, tenantID, matchID string, want ...string) {
	t.Helper()
	got, err := s.MatchRoster(context.Background(), tenantID, matchID)
	must(t, "MatchRoster", err)
	want = slices.Clone(want)
	slices.Sort(want)
	if len(got) != len(want) || (len(want) > 0 && !slices.Equal(got, want)) {
		t.Fatalf("roster of %s = %v, want %v", matchID, got, want)
	}
}

func testMatchRoster(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn, other := mustTenant(t, s, "ro"), mustTenant(t, s, "ro2")
	a := mustAccount(t, s, tn.ID, "dev-ro-a00000000")
	b := mustAccount(t, s, tn.ID, "dev-ro-b00000000")
	c := mustAccount(t, s, tn.ID, "dev-ro-c00000000")
	stranger := mustAccount(t, s, other.ID, "dev-ro-x00000000")
	mustMatch(t, s, tn.ID, "m1", "arena")
	mustMatch(t, s, tn.ID, "m2", "arena")
	mustMatch(t, s, other.ID, "m1", "arena") // the same match id in another tenant

	wantRoster(t, s, tn.ID, "m1")
	wantRoster(t, s, tn.ID, "no-such-match")

	must(t, "add b", s.AddMatchPlayers(ctx, tn.ID, "m1", []string{b.ID}, base))
	must(t, "add a and b again", s.AddMatchPlayers(ctx, tn.ID, "m1", []string{a.ID, b.ID, a.ID}, base.Add(time.Second)))
	wantRoster(t, s, tn.ID, "m1", a.ID, b.ID)
	wantRoster(t, s, tn.ID, "m2")    // rosters are per match
	wantRoster(t, s, other.ID, "m1") // and per tenant
	must(t, "empty add", s.AddMatchPlayers(ctx, tn.ID, "m2", nil, base))
	wantRoster(t, s, tn.ID, "m2")

	// All or nothing: an unknown account, or another tenant's, adds nobody.
	for name, ids := range map[string][]string{
		"unknown account":          {c.ID, "a_nobody"},
		"another tenant's account": {c.ID, stranger.ID},
	} {
		wantErr(t, name, s.AddMatchPlayers(ctx, tn.ID, "m1", ids, base), store.ErrNotFound)
		wantRoster(t, s, tn.ID, "m1", a.ID, b.ID)
	}
	wantErr(t, "unknown match", s.AddMatchPlayers(ctx, tn.ID, "nope", []string{a.ID}, base), store.ErrNotFound)
	wantErr(t, "match of another tenant", s.AddMatchPlayers(ctx, other.ID, "m2", []string{stranger.ID}, base), store.ErrNotFound)
	wantErr(t, "unknown tenant", s.AddMatchPlayers(ctx, "t_nope", "m1", []string{a.ID}, base), store.ErrNotFound)
	must(t, "stranger in its own tenant", s.AddMatchPlayers(ctx, other.ID, "m1", []string{stranger.ID}, base))
	wantRoster(t, s, other.ID, "m1", stranger.ID)
	wantRoster(t, s, tn.ID, "m1", a.ID, b.ID)

	// Many accounts at once (more than one multi-row statement).
	var many []string
	for i := range 230 {
		many = append(many, mustAccount(t, s, tn.ID, fmt.Sprintf("dev-ro-many-%05d", i)).ID)
	}
	must(t, "add many", s.AddMatchPlayers(ctx, tn.ID, "m2", many, base))
	wantRoster(t, s, tn.ID, "m2", many...)

	// After the final result the roster is closed, and kept.
	_, err := s.ApplyMatchReport(ctx, store.MatchReport{TenantID: tn.ID, MatchID: "m1", Final: true, At: base,
		Players: []store.PlayerReport{{AccountID: a.ID, Score: 1}}})
	must(t, "final", err)
	wantErr(t, "add after the end", s.AddMatchPlayers(ctx, tn.ID, "m1", []string{c.ID}, base), store.ErrMatchEnded)
	wantRoster(t, s, tn.ID, "m1", a.ID, b.ID)

	// A deleted account stays on the roster (an id, nothing else), so the
	// match's result still applies to the others.
	must(t, "delete b", s.DeleteAccount(ctx, tn.ID, b.ID))
	wantRoster(t, s, tn.ID, "m1", a.ID, b.ID)
}

func testMatchRosterConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	tn := mustTenant(t, s, "rc")
	mustMatch(t, s, tn.ID, "m", "arena")
	var ids []string
	for i := range 16 {
		ids = append(ids, mustAccount(t, s, tn.ID, fmt.Sprintf("dev-rc-%010d", i)).ID)
	}
	// Joins arrive concurrently, some twice: each account is on it once.
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(ids))
	for i := range 2 * len(ids) {
		wg.Go(func() {
			errs <- s.AddMatchPlayers(ctx, tn.ID, "m", []string{ids[i%len(ids)]}, base)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "concurrent add", err)
	}
	wantRoster(t, s, tn.ID, "m", ids...)
}
