package matchmaker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/etcdserver"
)

var endpoint string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "matchmaker-test")
	if err != nil {
		panic(err)
	}
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: dir, NoFsync: true})
	if err != nil {
		panic(err)
	}
	endpoint = es.Endpoint
	code := m.Run()
	es.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T) *clusterstate.Client {
	t.Helper()
	return dialTo(t, []string{endpoint})
}

// dialTo connects to the etcd members at endpoints.
func dialTo(t *testing.T, endpoints []string) *clusterstate.Client {
	t.Helper()
	c, err := clusterstate.Dial(clusterstate.DialConfig{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeAllocator records every allocation; fail, while positive, makes that
// many calls fail first.
type fakeAllocator struct {
	mu    sync.Mutex
	calls []allocCall
	fail  atomic.Int32
	n     atomic.Int64
	hook  func(call int) // called before answering, if set
	// failWith, if set, is the error of a failing call.
	failWith error
}

type allocCall struct {
	tenant, mode, region string
	seats                [][]Seat
	game                 string
}

func (f *fakeAllocator) Allocate(ctx context.Context, tenant, mode, region string, seats [][]Seat) (Allocation, error) {
	n := f.n.Add(1)
	if f.hook != nil {
		f.hook(int(n))
	}
	if f.fail.Add(-1) >= 0 {
		if f.failWith != nil {
			return Allocation{}, f.failWith
		}
		return Allocation{}, errors.New("no node free in region")
	}
	game := fmt.Sprintf("game-%d", n)
	f.mu.Lock()
	f.calls = append(f.calls, allocCall{tenant, mode, region, seats, game})
	f.mu.Unlock()
	return Allocation{GameID: game, NodeID: "node-1", Region: region}, nil
}

func (f *fakeAllocator) recorded() []allocCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]allocCall(nil), f.calls...)
}

type callerKey struct{}

// replica is one matchmaker behind a real HTTP server on loopback; the
// caller is read from the x-tenant and x-account headers.
type replica struct {
	m      *Matchmaker
	state  *clusterstate.Client
	client ludusv1connect.MatchmakingServiceClient
}

func startReplica(t *testing.T, alloc Allocator) *replica {
	t.Helper()
	return startReplicaOn(t, alloc, []string{endpoint}, 2*time.Second)
}

// startReplicaOn starts a replica on the etcd members at endpoints, its
// lease of leaseTTL.
func startReplicaOn(t *testing.T, alloc Allocator, endpoints []string, leaseTTL time.Duration) *replica {
	t.Helper()
	state := dialTo(t, endpoints)
	m, err := New(Config{State: state, Allocator: alloc, Interval: 50 * time.Millisecond,
		LeaseTTL: leaseTTL, StatusInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	svc := NewService(m, func(ctx context.Context) (Caller, error) {
		c, ok := ctx.Value(callerKey{}).(Caller)
		if !ok {
			return Caller{}, errors.New("no caller")
		}
		return c, nil
	})
	path, h := ludusv1connect.NewMatchmakingServiceHandler(svc)
	mux := http.NewServeMux()
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := Caller{TenantID: r.Header.Get("x-tenant"), AccountID: r.Header.Get("x-account")}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &replica{m: m, state: state, client: ludusv1connect.NewMatchmakingServiceClient(srv.Client(), srv.URL)}
}

var tenantSeq atomic.Int64

// newTenant sets 4v4 rules for mode "ranked" of a new tenant, regions eu and
// us within 100 ms.
func newTenant(t *testing.T, state *clusterstate.Client, mutate func(*ludusv1.MatchmakingRules)) string {
	t.Helper()
	tenant := fmt.Sprintf("tn%d-%d", time.Now().UnixNano()%1e6, tenantSeq.Add(1))
	rules := &ludusv1.MatchmakingRules{Mode: "ranked", TeamSize: 4, Teams: 2, BandStart: 100, BandStep: 50,
		BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: 45000, MaxRttMs: map[string]int32{"eu": 100, "us": 100}}
	if mutate != nil {
		mutate(rules)
	}
	admin, err := NewAdminService(state, func(context.Context, http.Header) (string, error) { return tenant, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetRules(testCtx(t, 5*time.Second), connect.NewRequest(&ludusv1.SetRulesRequest{Rules: rules})); err != nil {
		t.Fatal(err)
	}
	return tenant
}

// player is one FindMatch stream and what it received.
type player struct {
	account string
	cancel  context.CancelFunc
	done    chan struct{}
	last    *ludusv1.FindMatchResponse
	err     error
	updates atomic.Int32
	queue   atomic.Int32 // the queue size of the last searching update
}

func (r *replica) find(t *testing.T, tenant, account string, req *ludusv1.FindMatchRequest) *player {
	t.Helper()
	if req == nil {
		req = &ludusv1.FindMatchRequest{Mode: "ranked", RttMs: map[string]int32{"eu": 30, "us": 90}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	p := &player{account: account, cancel: cancel, done: make(chan struct{})}
	creq := connect.NewRequest(req)
	creq.Header().Set("x-tenant", tenant)
	creq.Header().Set("x-account", account)
	go func() {
		defer close(p.done)
		stream, err := r.client.FindMatch(ctx, creq)
		if err != nil {
			p.err = err
			return
		}
		defer stream.Close()
		for stream.Receive() {
			p.last = stream.Msg()
			if st := p.last.GetSearching(); st != nil {
				p.queue.Store(st.QueueSize)
				p.updates.Add(1)
			}
		}
		p.err = stream.Err()
	}()
	t.Cleanup(cancel)
	return p
}

// wait returns the stream's last message once it ended.
func (p *player) wait(t *testing.T, d time.Duration) *ludusv1.FindMatchResponse {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("player %s: stream still open after %v", p.account, d)
	}
	return p.last
}

// searching waits until the player's stream has been told it is searching.
func (p *player) searching(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.updates.Load() == 0 {
		select {
		case <-p.done:
			t.Fatalf("player %s: stream ended: %v %v", p.account, p.last, p.err)
		default:
		}
		// (p.last is read only after done is closed.)
		if time.Now().After(deadline) {
			t.Fatalf("player %s: never searching", p.account)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ticketCount(t *testing.T, state *clusterstate.Client, tenant string) int {
	t.Helper()
	n, err := state.CountTickets(testCtx(t, 5*time.Second), tenant, "ranked")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkOneMatch checks every player got found in the same game, each
// account seated once.
func checkOneMatch(t *testing.T, players []*player, alloc *fakeAllocator) string {
	t.Helper()
	game := ""
	for _, p := range players {
		resp := p.wait(t, 20*time.Second)
		f := resp.GetFound()
		if f == nil {
			t.Fatalf("player %s: last message %v, err %v; want found", p.account, resp, p.err)
		}
		if game == "" {
			game = f.GameId
		}
		if f.GameId != game {
			t.Fatalf("player %s in game %s, others in %s", p.account, f.GameId, game)
		}
	}
	var settled []allocCall
	for _, c := range alloc.recorded() {
		if c.game == game {
			settled = append(settled, c)
		}
	}
	if len(settled) != 1 {
		t.Fatalf("game %s allocated %d times", game, len(settled))
	}
	seen := map[string]bool{}
	for _, team := range settled[0].seats {
		for _, s := range team {
			if seen[s.AccountID] {
				t.Fatalf("account %s seated twice", s.AccountID)
			}
			seen[s.AccountID] = true
		}
	}
	if len(seen) != len(players) {
		t.Fatalf("%d seats for %d players", len(seen), len(players))
	}
	return game
}

func TestTicketEightPlayersOneMatch(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	var players []*player
	for i := range 8 {
		players = append(players, reps[i%3].find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	teams := map[int32]int{}
	for _, p := range players {
		f := p.last.GetFound()
		teams[f.Team]++
		if f.Region != "eu" || len(f.Teammates) != 4 || f.Slot < f.Team*4 || f.Slot >= f.Team*4+4 {
			t.Fatalf("player %s: %v", p.account, f)
		}
	}
	if teams[0] != 4 || teams[1] != 4 {
		t.Fatalf("teams %v, want 4 and 4", teams)
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return ticketCount(t, reps[0].state, tenant) == 0 })
}

func TestTicketPartyStaysOnOneTeam(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	code := createParty(t, reps[0], tenant, "lead", 3)
	var players, party []*player
	for i := range 3 {
		p := reps[i%3].find(t, tenant, fmt.Sprintf("friend%d", i), &ludusv1.FindMatchRequest{
			Mode: "ranked", PartyCode: code, PartySize: 3, RttMs: map[string]int32{"eu": 20 + int32(i)*10}})
		party = append(party, p)
	}
	players = append(players, party...)
	for i := range 5 {
		players = append(players, reps[(i+1)%3].find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	team := party[0].last.GetFound().Team
	for _, p := range party {
		if f := p.last.GetFound(); f.Team != team {
			t.Fatalf("party split: %s on team %d, %s on team %d", party[0].account, team, p.account, f.Team)
		}
	}
}

func createParty(t *testing.T, r *replica, tenant, account string, size int32) string {
	t.Helper()
	req := connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: "ranked", Size: size})
	req.Header().Set("x-tenant", tenant)
	req.Header().Set("x-account", account)
	resp, err := r.client.CreateParty(testCtx(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.Code) != 6 {
		t.Fatalf("party code %q", resp.Msg.Code)
	}
	return resp.Msg.Code
}

func TestTicketPartyMemberLeavingCancelsTheParty(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	code := createParty(t, reps[0], tenant, "lead", 3)
	var party []*player
	for i := range 3 {
		party = append(party, reps[i%2].find(t, tenant, fmt.Sprintf("friend%d", i), &ludusv1.FindMatchRequest{
			Mode: "ranked", PartyCode: code, PartySize: 3, RttMs: map[string]int32{"eu": 20}}))
	}
	// The party's ticket is queued once all three stream (alone it cannot
	// make a match of 8).
	waitFor(t, 5*time.Second, "the party's ticket", func() bool { return ticketCount(t, reps[0].state, tenant) == 1 })
	party[1].cancel()
	for _, p := range []*player{party[0], party[2]} {
		resp := p.wait(t, 5*time.Second)
		if c := resp.GetCancelled(); c == nil || c.Reason != PartyLeft {
			t.Fatalf("player %s: last message %v (%v), want cancelled %q", p.account, resp, p.err, PartyLeft)
		}
	}
	waitFor(t, 2*time.Second, "the party's ticket to leave", func() bool { return ticketCount(t, reps[0].state, tenant) == 0 })
	if len(alloc.recorded()) != 0 {
		t.Fatalf("allocations %v", alloc.recorded())
	}
	// The members may queue again, alone.
	again := reps[1].find(t, tenant, "friend0", nil)
	again.searching(t)
}

// An account's second party replaces its first: the first code is NotFound
// for a new member (saying why), while a member already in keeps searching.
func TestTicketNewPartyReplacesTheCreatorsLast(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	first := createParty(t, r, tenant, "lead", 3)
	early := r.find(t, tenant, "early", &ludusv1.FindMatchRequest{
		Mode: "ranked", PartyCode: first, PartySize: 3, RttMs: map[string]int32{"eu": 20}})
	early.searching(t)
	second := createParty(t, r, tenant, "lead", 2)
	if second == first {
		t.Fatalf("the same code twice: %s", first)
	}
	late := r.find(t, tenant, "late", &ludusv1.FindMatchRequest{
		Mode: "ranked", PartyCode: first, PartySize: 3, RttMs: map[string]int32{"eu": 20}})
	late.wait(t, 5*time.Second)
	if connect.CodeOf(late.err) != connect.CodeNotFound || !strings.Contains(late.err.Error(), "creates another party") {
		t.Fatalf("joining the replaced party: %v, want NotFound saying its creator made another", late.err)
	}
	select {
	case <-early.done:
		t.Fatalf("the member already in the replaced party was ended: %v %v", early.last, early.err)
	default:
	}
	// The new code works.
	joined := r.find(t, tenant, "late", &ludusv1.FindMatchRequest{
		Mode: "ranked", PartyCode: second, PartySize: 2, RttMs: map[string]int32{"eu": 20}})
	joined.searching(t)
}

// A member more than the party's size is refused with FailedPrecondition,
// can search alone afterwards, and the party it could not join still plays.
func TestTicketPartyFullIsFailedPrecondition(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	code := createParty(t, reps[0], tenant, "lead", 2)
	join := func(r *replica, account string) *player {
		return r.find(t, tenant, account, &ludusv1.FindMatchRequest{
			Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 20}})
	}
	party := []*player{join(reps[0], "friend0"), join(reps[1], "friend1")}
	waitFor(t, 5*time.Second, "the party's ticket", func() bool { return ticketCount(t, reps[0].state, tenant) == 1 })
	late := join(reps[1], "late")
	late.wait(t, 5*time.Second)
	if connect.CodeOf(late.err) != connect.CodeFailedPrecondition || !strings.Contains(late.err.Error(), "all 2 players of party") {
		t.Fatalf("a third member of a party of 2: %v, want FailedPrecondition saying the party is full", late.err)
	}
	players := append([]*player{}, party...)
	players = append(players, reps[0].find(t, tenant, "late", nil)) // alone now: not AlreadyExists
	for i := range 5 {
		players = append(players, reps[i%2].find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	if party[0].last.GetFound().Team != party[1].last.GetFound().Team {
		t.Fatal("the party was split")
	}
}

func TestTicketEnqueueTwiceIsAlreadyExists(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	first := reps[0].find(t, tenant, "twice", nil)
	first.searching(t)
	for i, r := range reps { // the same replica, and another
		second := r.find(t, tenant, "twice", nil)
		second.wait(t, 5*time.Second)
		if connect.CodeOf(second.err) != connect.CodeAlreadyExists {
			t.Fatalf("replica %d: second search: %v, want AlreadyExists", i, second.err)
		}
	}
	select {
	case <-first.done:
		t.Fatalf("the first search ended: %v %v", first.last, first.err)
	default:
	}
	// (first.last is read only after done is closed.)
	if n := ticketCount(t, reps[0].state, tenant); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
}

func TestTicketUnknownModeIsNotFound(t *testing.T) {
	r := startReplica(t, &fakeAllocator{})
	tenant := newTenant(t, r.state, nil)
	p := r.find(t, tenant, "a1", &ludusv1.FindMatchRequest{Mode: "casual", RttMs: map[string]int32{"eu": 30}})
	p.wait(t, 5*time.Second)
	if connect.CodeOf(p.err) != connect.CodeNotFound ||
		!strings.Contains(p.err.Error(), `no matchmaking rules for mode "casual": set them with MatchmakingAdminService.SetRules`) {
		t.Fatalf("got %v, want NotFound naming the fix", p.err)
	}
}

func TestTicketBadInputsAreInvalidArgument(t *testing.T) {
	r := startReplica(t, &fakeAllocator{})
	tenant := newTenant(t, r.state, nil)
	cases := map[string]*ludusv1.FindMatchRequest{
		"negative rtt":        {Mode: "ranked", RttMs: map[string]int32{"eu": -5}},
		"absurd rtt":          {Mode: "ranked", RttMs: map[string]int32{"eu": 2_000_000}},
		"no rtt":              {Mode: "ranked"},
		"no region near":      {Mode: "ranked", RttMs: map[string]int32{"eu": 400, "us": 300}},
		"unknown region only": {Mode: "ranked", RttMs: map[string]int32{"mars": 10}},
		"bad region name":     {Mode: "ranked", RttMs: map[string]int32{"eu/../x": 10}},
		"bad mode":            {Mode: "ranked/x", RttMs: map[string]int32{"eu": 10}},
		"party without code":  {Mode: "ranked", PartySize: 2, RttMs: map[string]int32{"eu": 10}},
		"party beyond a team": {Mode: "ranked", PartySize: 5, PartyCode: "ABCDEF", RttMs: map[string]int32{"eu": 10}},
		"huge party":          {Mode: "ranked", PartySize: 1000, PartyCode: "ABCDEF", RttMs: map[string]int32{"eu": 10}},
	}
	for name, req := range cases {
		p := r.find(t, tenant, "bad", req)
		p.wait(t, 5*time.Second)
		if connect.CodeOf(p.err) != connect.CodeInvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, p.err)
		}
	}
	// CreateParty: a party larger than a team.
	req := connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: "ranked", Size: 5})
	req.Header().Set("x-tenant", tenant)
	req.Header().Set("x-account", "bad")
	if _, err := r.client.CreateParty(testCtx(t, 5*time.Second), req); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("CreateParty of 5 for teams of 4: %v, want InvalidArgument", err)
	}
	// Unknown party code.
	p := r.find(t, tenant, "bad", &ludusv1.FindMatchRequest{Mode: "ranked", PartySize: 2, PartyCode: "ZZZZZZ", RttMs: map[string]int32{"eu": 10}})
	p.wait(t, 5*time.Second)
	if connect.CodeOf(p.err) != connect.CodeNotFound {
		t.Errorf("unknown party: %v, want NotFound", p.err)
	}
	// No caller.
	nobody := r.find(t, "", "", nil)
	nobody.wait(t, 5*time.Second)
	if connect.CodeOf(nobody.err) != connect.CodeUnauthenticated {
		t.Errorf("no caller: %v, want Unauthenticated", nobody.err)
	}
	if n := ticketCount(t, r.state, tenant); n != 0 {
		t.Fatalf("%d tickets queued by bad requests", n)
	}
}

func TestTicketStreamCloseRemovesTicket(t *testing.T) {
	r := startReplica(t, &fakeAllocator{})
	tenant := newTenant(t, r.state, nil)
	p := r.find(t, tenant, "leaver", nil)
	p.searching(t)
	if n := ticketCount(t, r.state, tenant); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
	start := time.Now()
	p.cancel()
	// Well within the 2 s lease: the stream's end deletes the ticket itself.
	waitFor(t, time.Second, "the ticket to leave", func() bool { return ticketCount(t, r.state, tenant) == 0 })
	t.Logf("ticket gone %v after the stream closed", time.Since(start))
	// And the account may search again at once.
	again := r.find(t, tenant, "leaver", nil)
	again.searching(t)
}

// The queue's leader publishes its size; the streams on another replica
// report it.
func TestTicketQueueSizeFromTheLeader(t *testing.T) {
	a, b := startReplica(t, &fakeAllocator{}), startReplica(t, &fakeAllocator{})
	tenant := newTenant(t, a.state, nil)
	waitFor(t, 10*time.Second, "a leader", func() bool { return a.m.Leading(tenant, "ranked") || b.m.Leading(tenant, "ranked") })
	other := b
	if b.m.Leading(tenant, "ranked") {
		other = a
	}
	var ps []*player
	for i := range 3 {
		p := other.find(t, tenant, fmt.Sprintf("q%d", i), nil)
		p.searching(t)
		ps = append(ps, p)
	}
	waitFor(t, 10*time.Second, "the leader to publish 3 tickets", func() bool {
		n, ok, err := other.state.QueueSize(testCtx(t, 5*time.Second), tenant, "ranked")
		return err == nil && ok && n == 3
	})
	// Read at most once a second by the replica: within a few of them.
	waitFor(t, 5*time.Second, "a stream to report 3 tickets", func() bool { return ps[0].queue.Load() == 3 })
	ps[2].cancel()
	waitFor(t, 10*time.Second, "the leader to publish 2 tickets", func() bool {
		n, ok, err := other.state.QueueSize(testCtx(t, 5*time.Second), tenant, "ranked")
		return err == nil && ok && n == 2
	})
}

func TestTicketFailedAllocationSearchesAgain(t *testing.T) {
	alloc := &fakeAllocator{}
	alloc.fail.Store(2)
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	var players []*player
	for i := range 8 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	if n := alloc.n.Load(); n != 3 {
		t.Fatalf("%d allocation attempts, want 2 failures and 1 success", n)
	}
	if _, _, n := r.m.AllocateLatency(); n != 3 {
		t.Fatalf("%d allocation latencies recorded, want 3", n)
	}
}

func TestTicketLeaderCrashLosesNothing(t *testing.T) {
	alloc := &fakeAllocator{}
	first := startReplica(t, alloc)
	tenant := newTenant(t, first.state, nil)
	waitFor(t, 5*time.Second, "the first replica to lead", func() bool { return first.m.Leading(tenant, "ranked") })
	others := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	// Twelve players on the other replicas: one match now, four left queued.
	var players []*player
	for i := range 12 {
		players = append(players, others[i%2].find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	waitFor(t, 10*time.Second, "a first match", func() bool { return len(alloc.recorded()) == 1 })
	waitFor(t, 5*time.Second, "4 tickets left", func() bool { return ticketCount(t, first.state, tenant) == 4 })

	// The leader crashes: its client closes without resigning, so its
	// lease (2 s) must expire before another replica leads.
	if !first.m.Leading(tenant, "ranked") {
		t.Fatal("the first replica no longer leads before the crash")
	}
	crash := time.Now()
	first.state.Close()
	for i := 12; i < 16; i++ {
		players = append(players, others[i%2].find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	waitFor(t, 10*time.Second, "a second match", func() bool { return len(alloc.recorded()) == 2 })
	t.Logf("second match %v after the crash", time.Since(crash))
	if others[0].m.Leading(tenant, "ranked") == others[1].m.Leading(tenant, "ranked") {
		t.Fatalf("leading: %v and %v, want exactly one", others[0].m.Leading(tenant, "ranked"), others[1].m.Leading(tenant, "ranked"))
	}
	games := map[string]int{}
	for _, p := range players {
		resp := p.wait(t, 15*time.Second)
		if resp.GetFound() == nil {
			t.Fatalf("player %s: %v %v", p.account, resp, p.err)
		}
		games[resp.GetFound().GameId]++
	}
	seated := map[string]int{}
	for _, c := range alloc.recorded() {
		if games[c.game] != 8 {
			t.Fatalf("game %s has %d players who were told of it, want 8 (%v)", c.game, games[c.game], games)
		}
		for _, team := range c.seats {
			for _, s := range team {
				seated[s.AccountID]++
			}
		}
	}
	if len(seated) != 16 {
		t.Fatalf("%d players seated, want 16", len(seated))
	}
	for a, n := range seated {
		if n != 1 {
			t.Fatalf("account %s seated %d times", a, n)
		}
	}
}

// The leader crashes between allocating a match and settling it: the next
// leader forms and allocates the match again, and every player is told of
// that game only (the first is wasted, never half-announced).
func TestTicketLeaderCrashDuringAllocation(t *testing.T) {
	alloc := &fakeAllocator{}
	var crashing atomic.Pointer[clusterstate.Client]
	alloc.hook = func(call int) {
		if call == 1 {
			crashing.Load().Close()
		}
	}
	first := startReplica(t, alloc)
	crashing.Store(first.state)
	tenant := newTenant(t, first.state, nil)
	waitFor(t, 5*time.Second, "the first replica to lead", func() bool { return first.m.Leading(tenant, "ranked") })
	others := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	var players []*player
	for i := range 8 {
		players = append(players, others[i%2].find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	game := checkOneMatch(t, players, alloc)
	calls := alloc.recorded()
	if len(calls) != 2 || calls[0].game == game || calls[1].game != game {
		t.Fatalf("allocations %v, players in %s: want the second allocation announced", calls, game)
	}
}

// A member asking for another party size than the party was created with
// is refused with InvalidArgument naming the party's, and takes no slot:
// the party still fills and plays.
func TestTicketWrongPartySizeIsInvalidArgument(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	code := createParty(t, reps[0], tenant, "lead", 2)
	wrong := reps[1].find(t, tenant, "stranger", &ludusv1.FindMatchRequest{
		Mode: "ranked", PartyCode: code, PartySize: 3, RttMs: map[string]int32{"eu": 20}})
	wrong.wait(t, 5*time.Second)
	if connect.CodeOf(wrong.err) != connect.CodeInvalidArgument ||
		!strings.Contains(wrong.err.Error(), `is for mode "ranked" with 2 players`) {
		t.Fatalf("joining a party of 2 as a party of 3: %v, want InvalidArgument naming the party's size", wrong.err)
	}
	var players []*player
	for i := range 2 {
		players = append(players, reps[i].find(t, tenant, fmt.Sprintf("friend%d", i), &ludusv1.FindMatchRequest{
			Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 20}}))
	}
	for i := range 6 {
		players = append(players, reps[i%2].find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
}

// Rules changed while replicas run reach them through their watch: a queue
// switched from 4v4 to 2v2 forms a match of four.
func TestTicketChangedRulesTakeEffect(t *testing.T) {
	alloc := &fakeAllocator{}
	reps := []*replica{startReplica(t, alloc), startReplica(t, alloc)}
	tenant := newTenant(t, reps[0].state, nil)
	waitFor(t, 5*time.Second, "a leader", func() bool {
		return reps[0].m.Leading(tenant, "ranked") || reps[1].m.Leading(tenant, "ranked")
	})
	rules := &ludusv1.MatchmakingRules{Mode: "ranked", TeamSize: 2, Teams: 2, BandStart: 100, BandStep: 50,
		BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: 45000, MaxRttMs: map[string]int32{"eu": 100, "us": 100}}
	if err := PutRules(testCtx(t, 5*time.Second), reps[0].state, tenant, rules); err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		waitFor(t, 5*time.Second, "the new rules", func() bool {
			got, ok := r.m.watchedRules(tenant, "ranked")
			return ok && got.rules.TeamSize == 2
		})
	}
	var players []*player
	for i := range 4 {
		players = append(players, reps[i%2].find(t, tenant, fmt.Sprintf("acc%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
}

// ErrOverloaded (etcd not keeping up with new searches) reaches the player
// as Unavailable: search again.
func TestTicketOverloadedIsUnavailable(t *testing.T) {
	if code := connect.CodeOf(connectError(ErrOverloaded)); code != connect.CodeUnavailable {
		t.Fatalf("ErrOverloaded maps to %v, want Unavailable", code)
	}
}

// TestTicketLeftOverPartyTicketDoesNotCancelNewSearches: a party ticket left
// in the queue after its members' searches ended (their deletion lost while
// etcd elected a leader, say) shares its players with their new searches.
// The new tickets are the players' searches now: they are matched, not
// cancelled as "already queued in another ticket", and the left-over ticket
// is never allocated and is taken out of the queue.
func TestTicketLeftOverPartyTicketDoesNotCancelNewSearches(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	old := leftOverPartyTicket(t, r, tenant, "leftover")
	players := []*player{r.find(t, tenant, "ada", nil), r.find(t, tenant, "bob", nil)}
	for i := range 6 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	for _, c := range alloc.recorded() {
		for _, team := range c.seats {
			for _, s := range team {
				if s.TicketID == old.ID {
					t.Fatalf("the left-over ticket %s was allocated in %s", old.ID, c.game)
				}
			}
		}
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return ticketCount(t, r.state, tenant) == 0 })
}

// TestTicketModesPerTenantBounded: a tenant has at most
// clusterstate.MaxModesPerTenant modes; SetRules of one more is
// ResourceExhausted saying what to do, while changing an existing mode's
// rules still works, and so does a new mode once one is deleted.
func TestTicketModesPerTenantBounded(t *testing.T) {
	rep := startReplica(t, &fakeAllocator{})
	tenant := newTenant(t, rep.state, nil) // mode "ranked"
	admin, err := NewAdminService(rep.state, func(context.Context, http.Header) (string, error) { return tenant, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 30*time.Second)
	set := func(mode string) error {
		rules := &ludusv1.MatchmakingRules{Mode: mode, TeamSize: 1, Teams: 2, BandStart: 100, BandStep: 50,
			BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: 45000, MaxRttMs: map[string]int32{"eu": 100}}
		_, err := admin.SetRules(ctx, connect.NewRequest(&ludusv1.SetRulesRequest{Rules: rules}))
		return err
	}
	for i := 1; i < clusterstate.MaxModesPerTenant; i++ {
		if err := set(fmt.Sprintf("mode-%d", i)); err != nil {
			t.Fatalf("mode %d: %v", i, err)
		}
	}
	err = set("one-too-many")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "delete one with DeleteRules") {
		t.Fatalf("a mode past the bound: %v, want ResourceExhausted saying what to do", err)
	}
	if err := set("mode-1"); err != nil {
		t.Fatalf("changing an existing mode at the bound: %v", err)
	}
	if _, err := admin.DeleteRules(ctx, connect.NewRequest(&ludusv1.DeleteRulesRequest{Mode: "mode-1"})); err != nil {
		t.Fatal(err)
	}
	if err := set("one-too-many"); err != nil {
		t.Fatalf("a new mode after a deletion: %v", err)
	}
}

// TestTicketPartyMatchedWhileItsWatchLags: a party member's watch of its
// party can lag behind etcd (it catches up after an election). The member
// may then see another member leave, while in etcd that member has joined
// again and the party has been matched, with this member in it. The
// member must be told the match, not that its party broke up: told that,
// it searched again alone, for ever, while the others played (a search
// goes by its own key, which only a settlement takes away).
func TestTicketPartyMatchedWhileItsWatchLags(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	ctx := testCtx(t, 40*time.Second)
	partyChanges, results := make(chan struct{}), make(chan struct{})
	r.m.faults.Store(&testFaults{partyChange: func() { <-partyChanges }, result: func() { <-results }})
	code := createParty(t, r, tenant, "bob", 2)
	bob := r.find(t, tenant, "bob", &ludusv1.FindMatchRequest{Mode: "ranked", PartyCode: code, PartySize: 2,
		RttMs: map[string]int32{"eu": 30}})
	bob.searching(t)

	// Ada, on another replica, joins, leaves (her search failed) and joins
	// again, and queues the party's ticket; bob's watch sees none of it yet.
	p := clusterstate.Party{Code: code, Tenant: tenant, Mode: "ranked", Size: 2}
	ada := clusterstate.PartyMember{Token: "ada-1",
		QueuedMember: clusterstate.QueuedMember{AccountID: "ada", Replica: "elsewhere", Rating: 1500, RTT: map[string]float64{"eu": 30}}}
	if _, err := r.state.JoinParty(ctx, r.m.currentLease(), p, ada); err != nil {
		t.Fatal(err)
	}
	if _, err := r.state.EndSearch(ctx, tenant, "ada", "ada-1", clusterstate.PartyMemberKey(tenant, code, "ada")); err != nil {
		t.Fatal(err)
	}
	ada.Token = "ada-2"
	j, err := r.state.JoinParty(ctx, r.m.currentLease(), p, ada)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Members) != 2 {
		t.Fatalf("the party after ada joined again: %v", j.Members)
	}
	pt := clusterstate.QueuedTicket{ID: clusterstate.PartyTicketID(code, j.Members), Tenant: tenant, Mode: "ranked", Party: code, Enqueued: time.Now()}
	for _, pm := range j.Members {
		qm := pm.QueuedMember
		qm.Slot, qm.MemberRev = pm.Slot, pm.Rev
		pt.Members = append(pt.Members, qm)
	}
	if ok, err := r.state.QueuePartyTicket(ctx, r.m.currentLease(), pt); err != nil || !ok {
		t.Fatalf("queue the party's ticket: %v %v", ok, err)
	}
	players := []*player{bob}
	for i := range 6 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	waitFor(t, 10*time.Second, "the match settled", func() bool { return ticketCount(t, r.state, tenant) == 0 })

	// Bob's watch catches up: ada joined, left, joined, and the party was
	// settled. Only then do the results arrive.
	close(partyChanges)
	time.Sleep(time.Second)
	close(results)
	game := ""
	for _, p := range players {
		resp := p.wait(t, 10*time.Second)
		if resp.GetFound() == nil {
			t.Fatalf("%s: last message %v (%v), want found", p.account, resp, p.err)
		}
		if game == "" {
			game = resp.GetFound().GameId
		}
		if resp.GetFound().GameId != game {
			t.Fatalf("%s in %s, the others in %s", p.account, resp.GetFound().GameId, game)
		}
	}
	if n := len(alloc.recorded()); n != 1 {
		t.Fatalf("%d allocations, want 1", n)
	}
}

// TestTicketQueuedDespiteALostAnswerIsFound: a ticket's write can be
// applied while its answer is lost (etcd's leader died after committing
// it). If the ticket was matched before the search could take it back out,
// the player is told the match, not to search again: told that, the
// player left seven others waiting in a game, and searched on alone. A
// party's ticket is queued by its last member, whose partner is told the
// match in any case.
func TestTicketQueuedDespiteALostAnswerIsFound(t *testing.T) {
	for _, party := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "party"}[party], func(t *testing.T) {
			alloc := &fakeAllocator{}
			r := startReplica(t, alloc)
			tenant := newTenant(t, r.state, nil)
			what, unlucky := "enqueue", "solo0"
			if party {
				what, unlucky = "party ticket", "bob"
			}
			var lost atomic.Int32
			r.m.faults.Store(&testFaults{lostAnswer: func(_ context.Context, w, account string) error {
				if w != what || account != unlucky {
					return nil
				}
				// The answer is lost after the match is settled.
				for ticketCount(t, r.state, tenant) != 0 {
					time.Sleep(20 * time.Millisecond)
				}
				lost.Add(1)
				return errors.New("etcdserver: server stopped")
			}})
			var players []*player
			solos := 8
			if party {
				code := createParty(t, r, tenant, "ada", 2)
				req := func() *ludusv1.FindMatchRequest {
					return &ludusv1.FindMatchRequest{Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 30}}
				}
				ada := r.find(t, tenant, "ada", req())
				ada.searching(t)
				waitFor(t, 5*time.Second, "ada in the party", func() bool {
					ms, _, err := r.state.PartyMembers(testCtx(t, time.Second), tenant, code)
					return err == nil && len(ms) == 1
				})
				players = append(players, ada, r.find(t, tenant, "bob", req())) // bob joins last: he queues
				solos = 6
			}
			for i := range solos {
				players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
			}
			checkOneMatch(t, players, alloc)
			if lost.Load() != 1 {
				t.Fatalf("%d answers lost, want 1: this test shows nothing", lost.Load())
			}
		})
	}
}

// TestTicketCancelledWriteReadsNoResult: a search whose write failed because
// its stream ended (the player left while the write waited) reads no result
// from etcd: there is nobody to tell, and the read visits every result on
// the replica. Its keys are still taken out. The write here fails as if
// etcd never applied it (its keys are deleted behind the search's back), so
// that the search's deletion finds nothing — the case that read.
func TestTicketCancelledWriteReadsNoResult(t *testing.T) {
	for _, party := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "party"}[party], func(t *testing.T) {
			r := startReplica(t, &fakeAllocator{})
			tenant := newTenant(t, r.state, nil)
			what, code := "enqueue", ""
			if party {
				what, code = "join", createParty(t, r, tenant, "ada", 2)
			}
			var reads, cancelled atomic.Int32
			var leaving atomic.Pointer[player]
			r.m.faults.Store(&testFaults{
				resultRead: func() { reads.Add(1) },
				lostAnswer: func(ctx context.Context, w, account string) error {
					if w != what || account != "ada" {
						return nil
					}
					dctx := testCtx(t, 5*time.Second)
					keys := []string{clusterstate.SearchKey(tenant, account)}
					if party {
						keys = append(keys, clusterstate.PartyMemberKey(tenant, code, account))
					} else {
						keys = append(keys, clusterstate.TicketsPrefix(tenant, "ranked"))
					}
					for _, k := range keys {
						if _, err := r.state.Raw().Delete(dctx, k, clientv3.WithPrefix()); err != nil {
							t.Error(err)
						}
					}
					for leaving.Load() == nil {
						time.Sleep(time.Millisecond)
					}
					leaving.Load().cancel()
					select { // the stream's end reaches the replica
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
						t.Error("the replica did not see the stream end")
					}
					cancelled.Add(1)
					return context.Canceled
				},
			})
			var req *ludusv1.FindMatchRequest
			if party {
				req = &ludusv1.FindMatchRequest{Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 30}}
			}
			ada := r.find(t, tenant, "ada", req)
			leaving.Store(ada)
			ada.wait(t, 10*time.Second)
			waitFor(t, 5*time.Second, "ada's search to end", func() bool {
				resp, err := r.state.Raw().Get(testCtx(t, 5*time.Second), clusterstate.SearchKey(tenant, "ada"))
				return err == nil && len(resp.Kvs) == 0 && cancelled.Load() == 1
			})
			// The search ends after its stream: give it the time a read takes.
			time.Sleep(300 * time.Millisecond)
			if n := reads.Load(); n != 0 {
				t.Fatalf("%d results read for a search whose stream had ended", n)
			}
			if n := ticketCount(t, r.state, tenant); n != 0 {
				t.Fatalf("%d tickets left", n)
			}
		})
	}
}

// TestTicketDeadPartyTicketIsDropped: a party ticket whose members' searches
// ended, and who do not search again, can never be settled (its member keys
// are gone). As the oldest ticket it anchored a match at every scan: a game
// was allocated, the settlement failed, and the players formed with it
// waited past MaxWait while a game started four times a second. The first
// failed settlement now drops it, and the others are matched.
func TestTicketDeadPartyTicketIsDropped(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, func(rules *ludusv1.MatchmakingRules) { rules.MaxWaitMs = 3000 })
	dead := leftOverPartyTicket(t, r, tenant, "deadparty")
	// Ada and Bob do not come back; eight players search.
	var players []*player
	for i := range 8 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	game := checkOneMatch(t, players, alloc)
	if n := alloc.n.Load(); n > 2 {
		t.Errorf("%d games allocated for one match; want at most one wasted on the dead ticket", n)
	}
	for _, c := range alloc.recorded() {
		for _, team := range c.seats {
			for _, s := range team {
				if c.game == game && s.TicketID == dead.ID {
					t.Fatalf("the dead ticket was seated in %s", game)
				}
			}
		}
	}
	waitFor(t, 5*time.Second, "an empty queue", func() bool { return ticketCount(t, r.state, tenant) == 0 })
}

// TestTicketFailingAllocationsBackOffAndTimeOut: a match whose game cannot
// be started (no node in the region, a module that refuses bots, a quota)
// was formed again at every scan, without end: its players searched past
// MaxWait, and every scan started work for it. Failed tickets now sit out
// a growing backoff, and time out at MaxWait saying why.
func TestTicketFailingAllocationsBackOffAndTimeOut(t *testing.T) {
	quota := connect.NewError(connect.CodeResourceExhausted, errors.New("tenant demo has 20 live games, its limit is 20: end a game or ask the operator to raise live_games"))
	for _, c := range []struct {
		name string
		err  error
		want string // in the players' reason
	}{
		{"node", nil, "no game could be started"},
		// A quota's refusal is the tenant's to explain: the players are told it.
		{"quota", fmt.Errorf("no game for the match: %w", quota), "its limit is 20"},
	} {
		t.Run(c.name, func(t *testing.T) {
			alloc := &fakeAllocator{failWith: c.err}
			alloc.fail.Store(1 << 30)
			r := startReplica(t, alloc)
			tenant := newTenant(t, r.state, func(rules *ludusv1.MatchmakingRules) { rules.MaxWaitMs = 2000 })
			var players []*player
			for i := range 8 {
				players = append(players, r.find(t, tenant, fmt.Sprintf("p%d", i), nil))
			}
			for _, p := range players {
				resp := p.wait(t, 8*time.Second)
				if to := resp.GetTimedOut(); to == nil || !strings.Contains(to.Reason, c.want) {
					t.Fatalf("%s: last message %v (%v), want timed out saying %q", p.account, resp, p.err, c.want)
				}
			}
			// 2 s of scans every 50 ms: 40 allocations without the backoff.
			if n := alloc.n.Load(); n > 8 {
				t.Fatalf("%d allocation attempts in 2 s; want a backoff (250 ms, doubling)", n)
			}
			waitFor(t, 5*time.Second, "an empty queue", func() bool { return ticketCount(t, r.state, tenant) == 0 })
		})
	}
}

// TestTicketLateDeletionSparesTheNextSearch: a search's deletion can be
// applied with its answer lost, and retried later (endLater), after the
// account searched again with the same party code. A party member's key is
// named for its account alone: the late retry deleted the new search's key,
// and the party broke up ("a party member left") with nobody leaving.
func TestTicketLateDeletionSparesTheNextSearch(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	ctx := testCtx(t, 30*time.Second)
	code := createParty(t, r, tenant, "ada", 2)
	req := func() *ludusv1.FindMatchRequest {
		return &ludusv1.FindMatchRequest{Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 30}}
	}
	ada := r.find(t, tenant, "ada", req())
	ada.searching(t)
	bob := r.find(t, tenant, "bob", req())
	bob.searching(t)
	var ms []clusterstate.PartyMember
	waitFor(t, 5*time.Second, "a full party", func() bool {
		var err error
		ms, _, err = r.state.PartyMembers(testCtx(t, time.Second), tenant, code)
		return err == nil && len(ms) == 2
	})
	// Bob's earlier search (token "bob-old") joined at a revision before
	// this one's: its late deletion names that revision.
	bobKey := clusterstate.PartyMemberKey(tenant, code, "bob")
	found, err := r.state.EndSearchOwned(ctx, tenant, "bob", "bob-old", clusterstate.OwnedKey{Key: bobKey, CreateRev: ms[0].CreateRev - 1})
	if err != nil || found[0] {
		t.Fatalf("the late deletion: found %v, %v; want the new key spared", found, err)
	}
	time.Sleep(500 * time.Millisecond)
	for _, p := range []*player{ada, bob} {
		select {
		case <-p.done:
			t.Fatalf("%s's search ended (%v, %v) after another search's late deletion", p.account, p.last, p.err)
		default:
		}
	}
	if n, _ := r.state.CountTickets(ctx, tenant, "ranked"); n != 1 {
		t.Fatalf("%d tickets, want the party's", n)
	}
}

// TestTicketLostJoinAnswerIsFound: a party join can be applied with its
// answer lost. When the party was matched before the search took its key
// back out, the member is seated: it must be told the match, not to search
// again (it searched again alone while its partner played with its seat
// empty).
func TestTicketLostJoinAnswerIsFound(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	var lost atomic.Int32
	r.m.faults.Store(&testFaults{lostAnswer: func(_ context.Context, w, account string) error {
		if w != "join" || account != "bob" {
			return nil
		}
		for ticketCount(t, r.state, tenant) != 0 || len(alloc.recorded()) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		lost.Add(1)
		return errors.New("etcdserver: server stopped")
	}})
	code := createParty(t, r, tenant, "ada", 2)
	req := func() *ludusv1.FindMatchRequest {
		return &ludusv1.FindMatchRequest{Mode: "ranked", PartyCode: code, PartySize: 2, RttMs: map[string]int32{"eu": 30}}
	}
	bob := r.find(t, tenant, "bob", req())
	waitFor(t, 5*time.Second, "bob in the party", func() bool {
		ms, _, err := r.state.PartyMembers(testCtx(t, time.Second), tenant, code)
		return err == nil && len(ms) == 1
	})
	players := []*player{bob, r.find(t, tenant, "ada", req())} // ada joins last: she queues
	for i := range 6 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	if lost.Load() != 1 {
		t.Fatalf("%d answers lost, want 1: this test shows nothing", lost.Load())
	}
}

// TestTicketSlowDeletionStillFindsTheMatch: after a lost answer, what the
// search's deletion finds tells whether its ticket was matched meanwhile.
// When etcd does not answer that deletion at once (an election still under
// way), the search tries again before it answers the player, rather than
// telling a seated player to search again.
func TestTicketSlowDeletionStillFindsTheMatch(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	var ends atomic.Int32
	r.m.faults.Store(&testFaults{lostAnswer: func(_ context.Context, w, account string) error {
		if account != "solo0" {
			return nil
		}
		switch {
		case w == "enqueue":
			for ticketCount(t, r.state, tenant) != 0 {
				time.Sleep(20 * time.Millisecond)
			}
			return errors.New("etcdserver: server stopped")
		case w == "end" && ends.Add(1) <= 2:
			return context.DeadlineExceeded
		}
		return nil
	}})
	var players []*player
	for i := range 8 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	checkOneMatch(t, players, alloc)
	if n := ends.Load(); n < 3 {
		t.Fatalf("%d deletions tried, want 2 that failed and 1 that went through: this test shows nothing", n)
	}
}

// leftOverPartyTicket leaves a party ticket of ada and bob in the queue
// after their searches ended (their deletion of the ticket lost, say): their
// member and search keys are gone, the ticket is not. It is older than any
// search the test starts after, by any clock.
func leftOverPartyTicket(t *testing.T, r *replica, tenant, code string) clusterstate.QueuedTicket {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	lease := r.m.currentLease()
	partyLease, err := r.state.GrantExpiringLease(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := clusterstate.Party{Code: code, Tenant: tenant, Mode: "ranked", Size: 2}
	if err := r.state.CreateParty(ctx, p, partyLease); err != nil {
		t.Fatal(err)
	}
	var members []clusterstate.PartyMember
	for _, acc := range []string{"ada", "bob"} {
		j, err := r.state.JoinParty(ctx, lease, p, clusterstate.PartyMember{Token: "old-" + acc,
			QueuedMember: clusterstate.QueuedMember{AccountID: acc, Replica: "gone", Rating: 1500, RTT: map[string]float64{"eu": 30, "us": 90}}})
		if err != nil {
			t.Fatal(err)
		}
		members = j.Members
	}
	old := clusterstate.QueuedTicket{ID: clusterstate.PartyTicketID(p.Code, members), Tenant: tenant, Mode: "ranked", Party: p.Code,
		Enqueued: time.Now().Add(-time.Second)}
	for _, pm := range members {
		qm := pm.QueuedMember
		qm.Slot, qm.MemberRev = pm.Slot, pm.Rev
		old.Members = append(old.Members, qm)
	}
	if ok, err := r.state.QueuePartyTicket(ctx, lease, old); err != nil || !ok {
		t.Fatalf("queue the party's ticket: %v %v", ok, err)
	}
	for _, pm := range members {
		if _, err := r.state.EndSearch(ctx, tenant, pm.AccountID, "old-"+pm.AccountID, clusterstate.PartyMemberKey(tenant, p.Code, pm.AccountID)); err != nil {
			t.Fatal(err)
		}
	}
	return old
}

// TestTicketLeaseLostAtTheSettlementIsFound: the replica's lease (the one
// its tickets live under) can be lost just after a settlement took its
// tickets, before the results reach their searches. The searches told their
// players "search again" although each had a seat in the settled game, and
// the seven others waited in it for no-shows. A search whose lease ends now
// reads its result first.
func TestTicketLeaseLostAtTheSettlementIsFound(t *testing.T) {
	alloc := &fakeAllocator{}
	r := startReplica(t, alloc)
	tenant := newTenant(t, r.state, nil)
	results := make(chan struct{})
	r.m.faults.Store(&testFaults{result: func() { <-results }})
	defer close(results)
	var players []*player
	for i := range 8 {
		players = append(players, r.find(t, tenant, fmt.Sprintf("solo%d", i), nil))
	}
	for _, p := range players {
		p.searching(t)
	}
	lease := r.m.currentLease()
	waitFor(t, 10*time.Second, "the match settled", func() bool { return len(alloc.recorded()) == 1 && ticketCount(t, r.state, tenant) == 0 })
	if _, err := r.state.Raw().Revoke(testCtx(t, 5*time.Second), clientv3.LeaseID(lease.ID())); err != nil {
		t.Fatal(err)
	}
	checkOneMatch(t, players, alloc)
}
