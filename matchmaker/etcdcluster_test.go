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
// etcd cluster, players and parties of two searching in waves, and etcd's
// leader killed (no hand-over) while the second wave queues. Every player
// ends up in a match: a player told Unavailable ("search again") searches
// again, as the clients do, and so does a party one of whose members was.
// Nobody is told two games, nobody is seated in two announced games, every
// announced game was allocated once and all its players were told of it,
// parties play on one team, and no ticket is left in the queue. Before a
// failed party join took its keys back out (search.party), 3 of 8 runs under
// -race stranded a party: a join applied after its caller was told
// Unavailable left a member key with nobody behind it.
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
		for i := range 20 { // 4 parties of two and 16 alone: three matches
			s := &searcher{accounts: []string{fmt.Sprintf("w%d-solo%d", n, i)}}
			if i < 4 {
				s.accounts = []string{fmt.Sprintf("w%d-party%d-a", n, i), fmt.Sprintf("w%d-party%d-b", n, i)}
			}
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
			t.Errorf("%v: %v", s.accounts, s.err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
	for _, s := range searchers {
		if s.attempts > 1 {
			retried++
			t.Logf("%v: %d attempts, %v", s.accounts, s.attempts, s.took)
		}
		team := s.found[s.accounts[0]].Team
		for _, acc := range s.accounts {
			f := s.found[acc]
			if f.GameId != s.found[s.accounts[0]].GameId || f.Team != team {
				t.Fatalf("party %v split: %v", s.accounts, s.found)
			}
			told[acc] = f
		}
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

// searcher is one player, or one party, searching until every member is
// found.
type searcher struct {
	accounts []string // a party's when more than one
	found    map[string]*ludusv1.MatchFound
	attempts int // the most searches one member made
	took     time.Duration
	err      error // why it gave up
}

// run searches, each member from its own replica (from first on), and
// searches again, as the clients do, whenever the matchmaker says to:
// Unavailable ("search again"), a party broken up because one of its
// members was told that (the member searches again with the same code,
// and so the party fills again), and AlreadyExists, which a search told
// Unavailable meets until its replica has taken its keys out of etcd
// (endLater: seconds, once etcd has a leader again).
func (s *searcher) run(ctx context.Context, reps []*replica, tenant string, first int) {
	start := time.Now()
	defer func() { s.took = time.Since(start) }()
	size := len(s.accounts)
	rep := func(i int) *replica { return reps[(first+i)%len(reps)] }
	code := ""
	for attempt := 1; size > 1 && code == ""; attempt++ {
		req := connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: "ranked", Size: int32(size)})
		req.Header().Set("x-tenant", tenant)
		req.Header().Set("x-account", s.accounts[0])
		resp, err := rep(attempt).client.CreateParty(ctx, req)
		switch {
		case err == nil:
			code = resp.Msg.Code
		case connect.CodeOf(err) != connect.CodeUnavailable || time.Since(start) > searchAgainFor:
			s.err = fmt.Errorf("create party (attempt %d): %w", attempt, err)
			return
		default:
			time.Sleep(200 * time.Millisecond)
		}
	}
	found := make([]*ludusv1.MatchFound, size)
	errs := make([]error, size)
	attempts := make([]int, size)
	var wg sync.WaitGroup
	for i, acc := range s.accounts {
		wg.Go(func() {
			for attempts[i] = 1; time.Since(start) <= searchAgainFor; attempts[i]++ {
				last, err := searchOnce(ctx, rep(i+attempts[i]), tenant, acc, code, size)
				if err == nil && last.GetFound() != nil {
					found[i] = last.GetFound()
					return
				}
				again := connect.CodeOf(err) == connect.CodeUnavailable || connect.CodeOf(err) == connect.CodeAlreadyExists ||
					(size > 1 && err == nil && last.GetCancelled().GetReason() == PartyLeft)
				if !again {
					errs[i] = fmt.Errorf("search %d of %s ended with %v, error %v", attempts[i], acc, last, err)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			errs[i] = fmt.Errorf("%s searched %d times in %v", acc, attempts[i]-1, searchAgainFor)
		})
	}
	wg.Wait()
	s.found = map[string]*ludusv1.MatchFound{}
	for i, acc := range s.accounts {
		s.attempts = max(s.attempts, attempts[i])
		if errs[i] != nil {
			s.err = errs[i]
			return
		}
		s.found[acc] = found[i]
	}
}

// searchAgainFor bounds how long a searcher goes on searching again.
const searchAgainFor = time.Minute

// searchOnce runs one FindMatch to its end: its last message, and its error.
func searchOnce(ctx context.Context, r *replica, tenant, account, code string, size int) (*ludusv1.FindMatchResponse, error) {
	req := &ludusv1.FindMatchRequest{Mode: "ranked", RttMs: map[string]int32{"eu": 30, "us": 90}}
	if code != "" {
		req.PartyCode, req.PartySize = code, int32(size)
	}
	creq := connect.NewRequest(req)
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
