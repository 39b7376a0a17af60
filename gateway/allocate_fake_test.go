package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/matchmaker"
)

// twoPlayers is a 1v1 match of alice and bob.
var twoPlayers = [][]matchmaker.Seat{{{AccountID: "alice"}}, {{AccountID: "bob"}}}

// allocate asks the gateway's allocator for a game of mode arena in region.
func allocate(t *testing.T, c *fakeCluster, region string, seats [][]matchmaker.Seat) (matchmaker.Allocation, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return matchAllocator{s: &gameService{g: c.gw}}.Allocate(ctx, tenantT1, "arena", region, seats)
}

// rosters counts the matches the gateway registered a roster for.
func (b *fakeBackend) rosterCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rosters)
}

// startCalls sums the StartGame calls of nodes.
func startCalls(nodes ...*fakeNode) int {
	total := 0
	for _, n := range nodes {
		n.snapshot(func(n *fakeNode) { total += n.startCalls })
	}
	return total
}

// A match with no node of its region to go to mints no match credential and
// writes no roster: there is nothing to start.
func TestAllocateChoosesNodeBeforeMinting(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	eu := c.addNode(clusterstate.NodeInfo{ID: "eu-1", Capacity: 8, Region: "eu"})
	c.waitNodes(1)
	_, err := allocate(t, c, "us", twoPlayers)
	if err == nil || !strings.Contains(err.Error(), `no sim node of region "us" can take the match`) {
		t.Fatalf("a match of a region without nodes: %v", err)
	}
	if m, r := c.backend.mints.Load(), c.backend.rosterCount(); m != 0 || r != 0 {
		t.Fatalf("the allocator minted %d credentials and wrote %d rosters for a match it could not place", m, r)
	}
	if n := startCalls(eu); n != 0 {
		t.Fatalf("a node of another region was asked to start the match %d times", n)
	}
	a, err := allocate(t, c, "eu", twoPlayers)
	if err != nil || a.NodeID != "eu-1" {
		t.Fatalf("a match of eu: %+v, %v", a, err)
	}
	if got := c.backend.roster(a.GameID); strings.Join(got, ",") != "alice,bob" {
		t.Fatalf("roster %v, want alice and bob", got)
	}
}

// A node's refusal that every node would repeat (the game's configuration,
// its module, its build gone from the module store) ends the allocation, and
// CreateGame, at the first node, with the node's code and words; a full
// node does not.
func TestStartStopsOnFinalRefusal(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: -1})
	a := c.addNode(clusterstate.NodeInfo{ID: "eu-a", Capacity: 8, Region: "eu"})
	b := c.addNode(clusterstate.NodeInfo{ID: "eu-b", Capacity: 8, Region: "eu"})
	c.waitNodes(2)
	for _, tc := range []struct {
		code connect.Code
		msg  string
	}{
		{connect.CodeInvalidArgument, "module arena does not take bots (its metadata does not declare \"bots\": true); create the game with bots 0"},
		{connect.CodeFailedPrecondition, "the module does not compile: invalid magic number"},
		{connect.CodeNotFound, "tenant t1 has no build " + fakeBuildID},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			for _, n := range []*fakeNode{a, b} {
				n.set(func(n *fakeNode) { n.startErr = connect.NewError(tc.code, errors.New(tc.msg)) })
			}
			before := startCalls(a, b)
			_, err := allocate(t, c, "eu", [][]matchmaker.Seat{{{AccountID: "alice"}}, {{Bot: true}}})
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != tc.code || ce.Message() != tc.msg {
				t.Fatalf("allocation: %v; want the node's %v %q", err, tc.code, tc.msg)
			}
			if n := startCalls(a, b) - before; n != 1 {
				t.Fatalf("the allocator asked %d nodes; every node would refuse alike", n)
			}
			before = startCalls(a, b)
			_, err = c.client(ticketAlice).CreateGame(context.Background(), connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
			if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.msg) || leaks(err.Error(), a, b) != "" {
				t.Fatalf("CreateGame: %v; want the node's %v %q, naming no node", err, tc.code, tc.msg)
			}
			if n := startCalls(a, b) - before; n != 1 {
				t.Fatalf("CreateGame asked %d nodes; every node would refuse alike", n)
			}
		})
	}
	t.Run("full", func(t *testing.T) {
		for _, n := range []*fakeNode{a, b} {
			n.set(func(n *fakeNode) {
				n.startErr = connect.NewError(connect.CodeResourceExhausted, errors.New("node is full (8 games)"))
			})
		}
		before := startCalls(a, b)
		if _, err := allocate(t, c, "eu", twoPlayers); err == nil || !strings.Contains(err.Error(), `no sim node of region "eu" can take the match`) {
			t.Fatalf("allocation with both nodes full: %v", err)
		}
		if n := startCalls(a, b) - before; n != 2 {
			t.Fatalf("the allocator asked %d nodes; a full node is no reason to stop", n)
		}
	})
}

// claimThenTimeOut makes nodes behave like a node that claimed a game in etcd
// but whose answer came too late (the gateway's call timed out): the first
// node asked claims the game and answers DeadlineExceeded, any node asked
// after answers AlreadyExists, as a real node's claim transaction would. It
// returns the node that claimed.
func claimThenTimeOut(c *fakeCluster, nodes ...*fakeNode) func() string {
	var mu sync.Mutex
	claimedBy := ""
	for _, n := range nodes {
		n.set(func(n *fakeNode) {
			n.startHook = func(_ context.Context, req *clusterv1.StartGameRequest) error {
				mu.Lock()
				defer mu.Unlock()
				if claimedBy != "" {
					return connect.NewError(connect.CodeAlreadyExists, errors.New("game "+req.GameId+" already exists"))
				}
				claimedBy = n.id
				c.addGame(req.TenantId, req.GameId, n.id)
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("context deadline exceeded"))
			}
		})
	}
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return claimedBy
	}
}

// A StartGame that timed out after its node claimed the game started it: the
// next node's AlreadyExists (for a game id just drawn at random) or, with no
// next node, etcd says so, and the game is reported started on the node that
// claimed it, not as a failure.
func TestStartTimedOutButClaimed(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: -1})
	a := c.addNode(clusterstate.NodeInfo{ID: "eu-a", Capacity: 8, Region: "eu"})
	b := c.addNode(clusterstate.NodeInfo{ID: "eu-b", Capacity: 8, Region: "eu"})
	u := c.addNode(clusterstate.NodeInfo{ID: "us-1", Capacity: 8, Region: "us"})
	c.waitNodes(3)

	t.Run("AlreadyExists from the next node", func(t *testing.T) {
		claimer := claimThenTimeOut(c, a, b)
		alloc, err := allocate(t, c, "eu", twoPlayers)
		if err != nil {
			t.Fatalf("allocation whose first node claimed the game: %v", err)
		}
		if alloc.NodeID != claimer() || startCalls(a, b) != 2 {
			t.Fatalf("allocated on %q after %d calls; %s claimed it", alloc.NodeID, startCalls(a, b), claimer())
		}
	})

	t.Run("no next node", func(t *testing.T) {
		claimer := claimThenTimeOut(c, u)
		alloc, err := allocate(t, c, "us", twoPlayers)
		if err != nil || alloc.NodeID != "us-1" || claimer() != "us-1" {
			t.Fatalf("allocation on the only node, which claimed the game: %+v, %v", alloc, err)
		}
	})

	t.Run("CreateGame", func(t *testing.T) {
		claimer := claimThenTimeOut(c, a, b, u)
		resp, err := c.client(ticketAlice).CreateGame(context.Background(), connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
		if err != nil {
			t.Fatalf("a game whose first node claimed it: %v", err)
		}
		if g := resp.Msg.Game; g.NodeId != claimer() || g.ModuleName != "arena" || g.State != clusterstate.StateRunning {
			t.Fatalf("created %+v; %s claimed it", g, claimer())
		}
	})
}

// A matched game passes the tenant's quotas like a created one, before
// anything of it is minted, registered or placed: over live_games,
// cpu_seconds_per_hour or archive_bytes the allocation fails with the quota's
// refusal; the games it admitted count against live_games for CreateGame too
// (and the reverse); games_per_minute, an account's, is not charged.
func TestAllocateAdmission(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	n := c.addNode(clusterstate.NodeInfo{ID: "eu-1", Capacity: 8, Region: "eu"})
	c.waitNodes(1)
	c.addGame(tenantT1, "g1", "eu-1")
	q := &fakeQuotas{st: &ludusv1.GetTenantQuotasResponse{Quotas: &ludusv1.Quotas{LiveGames: 1}, TenantSlug: "t1"}}
	var clock atomic.Int64 // seconds after the start; the quotas are cached 5 s
	start := time.Now()
	c.gw.cfg.Admission = NewAdmission(AdmissionConfig{Quotas: q, Now: func() time.Time { return start.Add(time.Duration(clock.Load()) * time.Second) }})
	refused := func(quota string, subs ...string) {
		t.Helper()
		_, err := allocate(t, c, "eu", twoPlayers)
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
			t.Fatalf("allocation over %s: %v; want the quota's ResourceExhausted", quota, err)
		}
		for _, s := range append(subs, quota) {
			if !strings.Contains(ce.Message(), s) {
				t.Fatalf("allocation over %s: %q lacks %q", quota, ce.Message(), s)
			}
		}
	}
	refused(quotaLiveGames, "tenant t1 has 1 live games, its limit is 1")
	if r, m, s, ro := c.backend.resolves.Load(), c.backend.mints.Load(), startCalls(n), c.backend.rosterCount(); r+m+int64(s+ro) != 0 {
		t.Fatalf("a refused match cost %d module resolutions, %d credentials, %d StartGame calls, %d rosters", r, m, s, ro)
	}
	if got := c.metricWith("ludus_gateway_limit_rejections_total", map[string]string{"tenant": tenantT1, "limit": quotaLiveGames}); got != 1 {
		t.Fatalf("limit rejections (live_games) = %v, want 1", got)
	}

	clock.Store(6)
	q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "t1", Quotas: &ludusv1.Quotas{CpuSecondsPerHour: 3600}, CpuSecondsLastHour: 3700}, nil)
	refused(quotaCPU, "tenant t1 used 3700 CPU-seconds of simulation in the last hour, its limit is 3600")
	clock.Store(12)
	q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "t1", Quotas: &ludusv1.Quotas{ArchiveBytes: 1000}, ArchiveBytes: 1000}, nil)
	refused(quotaArchive, "tenant t1 keeps 1000 bytes of archived game logs, its limit is 1000")

	// live_games 3 with g1 running: two matches, then neither CreateGame
	// nor a third match (the fake node writes nothing to etcd: only the
	// gateway's own count of its admissions holds them).
	clock.Store(18)
	q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "t1", Quotas: &ludusv1.Quotas{LiveGames: 3}}, nil)
	for i := range 2 {
		if _, err := allocate(t, c, "eu", twoPlayers); err != nil {
			t.Fatalf("match %d under live_games: %v", i+1, err)
		}
	}
	_, err := c.client(ticketAlice).CreateGame(context.Background(), connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
	wantRefused(t, quotaLiveGames, quotaLiveGames, err, "tenant t1 has 3 live games, its limit is 3")
	refused(quotaLiveGames, "tenant t1 has 3 live games, its limit is 3")

	// games_per_minute bounds an account's creations, not the matchmaker's.
	clock.Store(60)
	q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "t1", Quotas: &ludusv1.Quotas{GamesPerMinute: 1}}, nil)
	for i := range 3 {
		if _, err := allocate(t, c, "eu", twoPlayers); err != nil {
			t.Fatalf("match %d with games_per_minute 1: %v", i+1, err)
		}
	}
}
