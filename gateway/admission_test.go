package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// fakeQuotas is the backend's QuotaClusterService as admission sees it.
type fakeQuotas struct {
	ludusv1connect.QuotaClusterServiceClient
	mu    sync.Mutex
	st    *ludusv1.GetTenantQuotasResponse
	err   error
	calls atomic.Int64
}

func (f *fakeQuotas) GetTenantQuotas(_ context.Context, r *connect.Request[ludusv1.GetTenantQuotasRequest]) (*connect.Response[ludusv1.GetTenantQuotasResponse], error) {
	f.calls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return connect.NewResponse(f.st), nil
}

func (f *fakeQuotas) set(st *ludusv1.GetTenantQuotasResponse, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st, f.err = st, err
}

type admissionRig struct {
	a     *Admission
	q     *fakeQuotas
	now   time.Time
	games map[string]bool // the tenant's games in etcd: id → live
	last  string          // the game id of the last check
	n     int
	lc    atomic.Int64 // live counts asked
}

func newAdmissionRig(q *ludusv1.Quotas) *admissionRig {
	r := &admissionRig{q: &fakeQuotas{st: &ludusv1.GetTenantQuotasResponse{Quotas: q, TenantSlug: "demo"}},
		now: time.Date(2026, 3, 1, 10, 15, 0, 0, time.UTC), games: map[string]bool{}}
	r.a = NewAdmission(AdmissionConfig{Quotas: r.q, Now: func() time.Time { return r.now }})
	return r
}

// check admits a new game (its id in r.last) for account ("" for a matched
// game), etcd listing r.games.
func (r *admissionRig) check(account string) (string, error) {
	r.n++
	r.last = fmt.Sprintf("g%d", r.n)
	return r.a.check(context.Background(), "t_demo", account, r.last, func(context.Context, string) (map[string]bool, error) {
		r.lc.Add(1)
		return maps.Clone(r.games), nil
	})
}

// running makes etcd list n running games other than the admitted ones.
func (r *admissionRig) running(n int) {
	for i := range n {
		r.games[fmt.Sprintf("old%d", i)] = true
	}
}

func wantRefused(t *testing.T, quota, wantQuota string, err error, subs ...string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || quota != wantQuota {
		t.Fatalf("refusal: quota %q, err %v; want ResourceExhausted by %s", quota, err, wantQuota)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("message %q lacks %q", err, s)
		}
	}
}

func TestAdmissionLiveGames(t *testing.T) {
	r := newAdmissionRig(&ludusv1.Quotas{LiveGames: 2})
	r.running(1)
	if q, err := r.check("alice"); err != nil || q != "" {
		t.Fatalf("1 of 2 live: %q, %v", q, err)
	}
	first := r.last
	// etcd does not show the game just admitted yet: it counts anyway.
	q, err := r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "tenant demo has 2 live games, its limit is 2: end a game or ask the operator to raise live_games")
	// Once etcd shows it, it is not counted twice.
	r.games[first] = true
	q, err = r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "has 2 live games")
	// A game ended.
	r.games["old0"] = false
	if q, err := r.check("bob"); err != nil {
		t.Fatalf("after a game ended: %q, %v", q, err)
	}
}

func TestAdmissionGamesPerMinute(t *testing.T) {
	r := newAdmissionRig(&ludusv1.Quotas{GamesPerMinute: 3})
	for i := range 3 {
		if q, err := r.check("alice"); err != nil {
			t.Fatalf("creation %d: %q, %v", i+1, q, err)
		}
	}
	q, err := r.check("alice")
	wantRefused(t, q, quotaPerMinute, err, "account alice created 3 games in the last minute on this gateway, its limit is 3 a minute",
		"games_per_minute, counted by each gateway", "retry in 20 s")
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Meta().Get("Retry-After") != "20" {
		t.Fatalf("Retry-After = %q, want 20", ce.Meta().Get("Retry-After"))
	}
	if q, err := r.check("bob"); err != nil {
		t.Fatalf("another account: %q, %v", q, err)
	}
	if r.lc.Load() != 0 {
		t.Fatal("live games were counted for a tenant without a live_games quota")
	}
	r.now = r.now.Add(19 * time.Second)
	q, err = r.check("alice")
	wantRefused(t, q, quotaPerMinute, err, "retry in 1 s")
	r.now = r.now.Add(time.Second)
	if q, err := r.check("alice"); err != nil {
		t.Fatalf("after 20 s: %q, %v", q, err)
	}
}

func TestAdmissionCPUAndArchive(t *testing.T) {
	r := newAdmissionRig(nil)
	r.q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "demo", Quotas: &ludusv1.Quotas{CpuSecondsPerHour: 3600, LiveGames: 100},
		CpuSecondsLastHour: 3700.6, CpuBelowQuotaAt: timestamppb.New(time.Date(2026, 3, 1, 10, 45, 0, 0, time.UTC))}, nil)
	q, err := r.check("alice")
	wantRefused(t, q, quotaCPU, err, "tenant demo used 3700 CPU-seconds of simulation in the last hour, its limit is 3600",
		"at 10:45 UTC if its running games use no more", "raise cpu_seconds_per_hour")
	var ce *connect.Error
	if errors.As(err, &ce); ce.Meta().Get("Retry-After") != "1800" {
		t.Fatalf("Retry-After = %q, want 1800", ce.Meta().Get("Retry-After"))
	}
	if r.lc.Load() != 0 {
		t.Fatal("live games counted for a refused creation")
	}
	// The backend's answer is reused for 5 s.
	r.q.set(&ludusv1.GetTenantQuotasResponse{TenantSlug: "demo", Quotas: &ludusv1.Quotas{ArchiveBytes: 1000}, ArchiveBytes: 1000}, nil)
	if _, err := r.check("alice"); connect.CodeOf(err) != connect.CodeResourceExhausted || r.q.calls.Load() != 1 {
		t.Fatalf("within 5 s: %v, %d backend calls", err, r.q.calls.Load())
	}
	r.now = r.now.Add(5 * time.Second)
	q, err = r.check("alice")
	wantRefused(t, q, quotaArchive, err, "tenant demo keeps 1000 bytes of archived game logs, its limit is 1000",
		"until the operator raises archive_bytes")
	r.now = r.now.Add(5 * time.Second)
	r.q.set(&ludusv1.GetTenantQuotasResponse{Quotas: &ludusv1.Quotas{ArchiveBytes: 1000}, ArchiveBytes: 999}, nil)
	if q, err := r.check("alice"); err != nil {
		t.Fatalf("below every quota: %q, %v", q, err)
	}
}

func TestAdmissionBackendErrors(t *testing.T) {
	r := newAdmissionRig(nil)
	r.q.set(nil, connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 10.0.0.7:8081: refused")))
	_, err := r.check("alice")
	if connect.CodeOf(err) != connect.CodeUnavailable || strings.Contains(err.Error(), "10.0.0.7") {
		t.Fatalf("backend down: %v (Unavailable, naming no address)", err)
	}
	r.q.set(nil, connect.NewError(connect.CodeUnimplemented, errors.New("no quotas here")))
	if q, err := r.check("alice"); err != nil {
		t.Fatalf("a backend without quotas: %q, %v", q, err)
	}
}

// TestAdmissionCreateGame: the gateway's CreateGame refuses over a quota
// before it asks the backend or any node, counting the tenant's games in
// etcd; without Config.Admission nothing is refused.
func TestAdmissionCreateGame(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	c.addNode(clusterstate.NodeInfo{ID: "n1", Capacity: 8})
	c.waitNodes(1)
	c.addGame(tenantT1, "g1", "n1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := &fakeQuotas{st: &ludusv1.GetTenantQuotasResponse{Quotas: &ludusv1.Quotas{LiveGames: 1}, TenantSlug: "t1"}}
	var clock atomic.Int64 // seconds after the start
	start := time.Now()
	c.gw.cfg.Admission = NewAdmission(AdmissionConfig{Quotas: q, Now: func() time.Time { return start.Add(time.Duration(clock.Load()) * time.Second) }})
	_, err := c.client(ticketAlice).CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
	wantRefused(t, quotaLiveGames, quotaLiveGames, err, "tenant t1 has 1 live games, its limit is 1")
	if n := c.backend.resolves.Load(); n != 0 {
		t.Fatalf("a refused creation asked the backend %d times", n)
	}
	q.set(&ludusv1.GetTenantQuotasResponse{Quotas: &ludusv1.Quotas{LiveGames: 2}}, nil)
	clock.Store(6) // past the cached answer
	if _, err := c.client(ticketAlice).CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"})); err != nil {
		t.Fatalf("under the quota: %v", err)
	}
}

// An admitted game counts from its own admission until etcd lists it, for as
// long as its placement takes (a node claims it only after loading,
// compiling and initializing its module), not for a window from the first
// game of a burst: one admitted 1.9 s after another must still count 0.2 s
// later, and 40 s later while its node is still compiling.
func TestAdmissionCountsEachGameUntilListed(t *testing.T) {
	r := newAdmissionRig(&ludusv1.Quotas{LiveGames: 3})
	r.running(1)
	if _, err := r.check("alice"); err != nil { // t=0: 1 live + this = 2
		t.Fatal(err)
	}
	r.games[r.last] = true // its node claimed it
	r.a.placed("t_demo", r.last, gameStarted)
	r.now = r.now.Add(1900 * time.Millisecond)
	if _, err := r.check("alice"); err != nil { // t=1.9 s: 2 live + this = 3
		t.Fatal(err)
	}
	placing := r.last
	r.now = r.now.Add(200 * time.Millisecond) // etcd does not list it yet
	q, err := r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "tenant demo has 3 live games, its limit is 3")
	r.now = r.now.Add(40 * time.Second) // a cold compile
	q, err = r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "has 3 live games")
	// Started: etcd lists it from the next read, and it is counted once.
	r.a.placed("t_demo", placing, gameStarted)
	r.games[placing] = true
	q, err = r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "has 3 live games")
	// A read that started as early as the one that listed it, and does not,
	// may predate the claim: it counts.
	delete(r.games, placing)
	q, err = r.check("bob")
	wantRefused(t, q, quotaLiveGames, err, "has 3 live games")
	// It ended and its keys went: a later read does not count it.
	r.now = r.now.Add(time.Millisecond)
	if q, err := r.check("bob"); err != nil {
		t.Fatalf("after the game ended: %q, %v", q, err)
	}
}

// A game no node started stops counting at once; one whose node call timed
// out (the node may claim it yet) counts for pendingAfterPlacement unless
// etcd lists it.
func TestAdmissionPlacementOutcomes(t *testing.T) {
	r := newAdmissionRig(&ludusv1.Quotas{LiveGames: 1})
	if _, err := r.check("alice"); err != nil {
		t.Fatal(err)
	}
	q, err := r.check("alice")
	wantRefused(t, q, quotaLiveGames, err, "has 1 live games")
	r.a.placed("t_demo", "g1", gameNotStarted)
	if _, err := r.check("alice"); err != nil {
		t.Fatalf("after a placement that started nothing: %v", err)
	}
	r.a.placed("t_demo", r.last, gameMaybeStarted)
	r.now = r.now.Add(pendingAfterPlacement - time.Second)
	q, err = r.check("alice")
	wantRefused(t, q, quotaLiveGames, err, "has 1 live games")
	r.now = r.now.Add(time.Second)
	if _, err := r.check("alice"); err != nil {
		t.Fatalf("%v after a timed-out placement etcd never listed: %v", pendingAfterPlacement, err)
	}
	if len(r.a.pending["t_demo"]) != 1 {
		t.Fatalf("the admission remembers %d games of the tenant, want 1 (the one just admitted)", len(r.a.pending["t_demo"]))
	}
}

// Through CreateGame: a game whose node is still starting it (a cold
// compile) counts against live_games however long that takes.
func TestAdmissionCreateGameWhileNodeStarts(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	n := c.addNode(clusterstate.NodeInfo{ID: "n1", Capacity: 8})
	c.waitNodes(1)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	n.set(func(n *fakeNode) {
		n.startHook = func(ctx context.Context, _ *clusterv1.StartGameRequest) error {
			once.Do(func() { close(entered) })
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
		}
	})
	q := &fakeQuotas{st: &ludusv1.GetTenantQuotasResponse{Quotas: &ludusv1.Quotas{LiveGames: 1}, TenantSlug: "t1"}}
	var clock atomic.Int64 // seconds after the start
	start := time.Now()
	c.gw.cfg.Admission = NewAdmission(AdmissionConfig{Quotas: q, Now: func() time.Time { return start.Add(time.Duration(clock.Load()) * time.Second) }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := c.client(ticketAlice).CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
		first <- err
	}()
	<-entered
	clock.Store(4) // the node is still compiling
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	defer bcancel()
	_, err := c.client(ticketBob).CreateGame(bctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
	wantRefused(t, quotaLiveGames, quotaLiveGames, err, "tenant t1 has 1 live games, its limit is 1")
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first game: %v", err)
	}
}
