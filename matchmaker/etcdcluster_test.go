package matchmaker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/etcdserver"
)

// TestTicketEtcdLeaderCrashLosesNothing: three replicas on a three-member
// etcd cluster, players searching in waves, and etcd's leader killed (no
// hand-over) while the second wave queues. Every player ends up in a match:
// a player told Unavailable ("search again") searches again, as the clients
// do. Nobody is told two games, nobody is seated in two announced games,
// every announced game was allocated once and all its players were told of
// it, and no ticket is left in the queue.
//
// Parties are left out, and that is a known fault, not a choice: with
// parties of two in the waves, 3 of 8 runs under -race stranded a party (a
// member waiting alone in a party its partner did not come back to, or the
// re-formed party's ticket refused because the old one was still queued).
// Searching again with the same party code while the old search's keys are
// still being deleted is not safe yet (docs/RATIONALE.md).
func TestTicketEtcdLeaderCrashLosesNothing(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	members, endpoints := startEtcdCluster(t, ctx)
	alloc := &fakeAllocator{}
	var reps []*replica
	for range 3 {
		reps = append(reps, startReplicaOn(t, alloc, endpoints, 5*time.Second))
	}
	tenant := newTenant(t, reps[0].state, nil)

	var searchers []*searcher
	var wg sync.WaitGroup
	wave := func(n int) {
		for i := range 24 { // three matches
			s := &searcher{account: fmt.Sprintf("w%d-p%d", n, i)}
			searchers = append(searchers, s)
			wg.Go(func() { s.run(ctx, reps, tenant, i) })
		}
	}
	wave(1)
	waitFor(t, 20*time.Second, "a first match", func() bool { return len(alloc.recorded()) >= 1 })
	wave(2)
	leader := -1
	waitFor(t, 10*time.Second, "etcd's leader", func() bool {
		for i, m := range members {
			if m.Leader() {
				leader = i
			}
		}
		return leader >= 0
	})
	members[leader].Kill()
	killed := time.Now()
	time.Sleep(time.Second) // the election is under way
	wave(3)
	wg.Wait()
	t.Logf("all searches over %v after etcd's leader died; %d allocations", time.Since(killed).Round(time.Millisecond), len(alloc.recorded()))

	told := map[string]*ludusv1.MatchFound{} // account -> the game it was told
	retried := 0
	failed := false
	for _, s := range searchers {
		if s.err != nil {
			t.Errorf("%s: %v", s.account, s.err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
	for _, s := range searchers {
		if s.attempts > 1 {
			retried++
			t.Logf("%s: %d attempts, %v", s.account, s.attempts, s.took)
		}
		told[s.account] = s.found
	}
	t.Logf("%d of %d searches searched again", retried, len(searchers))
	seats := map[string][]string{} // account -> announced games it is seated in
	announced := map[string]int{}
	for _, f := range told {
		announced[f.GameId]++
	}
	byGame := map[string]int{}
	for _, c := range alloc.recorded() {
		byGame[c.game]++
		if announced[c.game] == 0 {
			continue // allocated, then not settled: wasted, never announced
		}
		for _, team := range c.seats {
			for _, st := range team {
				seats[st.AccountID] = append(seats[st.AccountID], c.game)
				if f := told[st.AccountID]; f == nil || f.GameId != c.game {
					t.Errorf("%s is seated in announced game %s but was told %v", st.AccountID, c.game, f)
				}
			}
		}
	}
	for game, n := range announced {
		if byGame[game] != 1 || n != 8 {
			t.Errorf("game %s: allocated %d times, %d players told of it; want once and 8", game, byGame[game], n)
		}
	}
	for acc, games := range seats {
		if len(games) != 1 {
			t.Errorf("%s seated in %d announced games: %v", acc, len(games), games)
		}
	}
	waitFor(t, 10*time.Second, "an empty queue", func() bool { return ticketCount(t, reps[0].state, tenant) == 0 })
}

// TestTicketLeftBehindWhileEtcdIsDownIsTakenOut: a search that ends while
// etcd has no quorum cannot delete its keys then. They are bound to the
// replica's lease, which outlives the outage, so the replica deletes them
// once etcd is back: the ticket is not matched without its player, and the
// account can search again.
func TestTicketLeftBehindWhileEtcdIsDownIsTakenOut(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	members, endpoints := startEtcdCluster(t, ctx)
	// A lease long enough to outlive the outage: the keys must not simply
	// go with it.
	r := startReplicaOn(t, &fakeAllocator{}, endpoints, 30*time.Second)
	// Nobody times out meanwhile (that too would take the ticket out).
	tenant := newTenant(t, r.state, func(rules *ludusv1.MatchmakingRules) { rules.MaxWaitMs = 3_600_000 })
	p := r.find(t, tenant, "alone", nil)
	p.searching(t)
	waitFor(t, 5*time.Second, "the ticket queued", func() bool { return ticketCount(t, r.state, tenant) == 1 })
	lease := r.m.currentLease()

	// etcd goes away whole, so that no member holds the search's own
	// deletion to commit later; it is back after the deletion has given up
	// (3 s, and the group commit's 5 s), well within the replica's lease.
	for _, m := range members {
		m.Kill()
	}
	p.cancel()
	p.wait(t, 10*time.Second)
	time.Sleep(6 * time.Second)
	for i, m := range members {
		back, err := m.Restart(ctx)
		if err != nil {
			t.Fatal(err)
		}
		members[i] = back
	}
	waitFor(t, 30*time.Second, "the ticket taken out", func() bool {
		n, err := r.state.CountTickets(ctx, tenant, "ranked")
		return err == nil && n == 0
	})
	// A key put with the lease proves it outlived the outage: the keys did
	// not simply go with it.
	probe := clusterstate.Party{Code: "PROBE1", Tenant: tenant, Mode: "ranked", Size: 2}
	if err := r.state.CreateParty(ctx, probe, lease.ID()); err != nil {
		t.Fatalf("the replica's lease did not outlive the outage (%v): this test shows nothing", err)
	}
	again := r.find(t, tenant, "alone", nil)
	again.searching(t)
}

// startEtcdCluster starts three etcd members on loopback, stopped when the
// test ends, and returns them and their client URLs.
func startEtcdCluster(t *testing.T, ctx context.Context) ([]*etcdserver.Server, []string) {
	t.Helper()
	members, err := etcdserver.StartCluster(ctx, t.TempDir(), 3, etcdserver.Config{NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.Close()
		}
	})
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.Endpoint)
	}
	return members, endpoints
}

// searcher is one player searching until found.
type searcher struct {
	account  string
	found    *ludusv1.MatchFound
	attempts int
	took     time.Duration
	err      error // why it gave up
}

// run searches, from another replica each time (from first on), again
// whenever the matchmaker says to, as the clients do: Unavailable ("search
// again"), and AlreadyExists, which a search told Unavailable meets until
// its replica has taken its keys out of etcd (endLater: seconds, once etcd
// has a leader again).
func (s *searcher) run(ctx context.Context, reps []*replica, tenant string, first int) {
	start := time.Now()
	defer func() { s.took = time.Since(start) }()
	for s.attempts = 1; time.Since(start) <= searchAgainFor; s.attempts++ {
		last, err := searchOnce(ctx, reps[(first+s.attempts)%len(reps)], tenant, s.account)
		if err == nil && last.GetFound() != nil {
			s.found = last.GetFound()
			return
		}
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeAlreadyExists {
			s.err = fmt.Errorf("search %d ended with %v, error %v", s.attempts, last, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.err = fmt.Errorf("searched %d times in %v", s.attempts-1, searchAgainFor)
}

// searchAgainFor bounds how long a searcher goes on searching again.
const searchAgainFor = time.Minute

// searchOnce runs one FindMatch to its end: its last message, and its error.
func searchOnce(ctx context.Context, r *replica, tenant, account string) (*ludusv1.FindMatchResponse, error) {
	creq := connect.NewRequest(&ludusv1.FindMatchRequest{Mode: "ranked", RttMs: map[string]int32{"eu": 30, "us": 90}})
	creq.Header().Set("x-tenant", tenant)
	creq.Header().Set("x-account", account)
	stream, err := r.client.FindMatch(ctx, creq)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var last *ludusv1.FindMatchResponse
	for stream.Receive() {
		last = stream.Msg()
	}
	return last, stream.Err()
}
