package simnode

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/internal/clock"
	"ludus.dev/ludus/sdk/abi"
)

// clockNode is a node whose games tick on a fake clock, served over h2c.
type clockNode struct {
	n   *Node
	c   clusterv1connect.NodeServiceClient
	clk *clock.Fake
}

func startClockNode(t *testing.T, id string, cfg Config) clockNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake()
	cfg.ID, cfg.Addr, cfg.Etcd, cfg.Engine, cfg.Modules = id, "http://"+ln.Addr().String(), state, testEng, staticModules{}
	cfg.ClusterToken, cfg.Clock, cfg.LeaseTTL = testToken, clk, 3*time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(n.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close(context.Background())
	})
	return clockNode{n: n, c: clusterv1connect.NewNodeServiceClient(h2cClient(), srv.URL, connect.WithInterceptors(bearer.Token(testToken))), clk: clk}
}

// step advances the fake clock by d, one second at a time, and waits after
// each second for the game to tick (nudging it on when it waits for its log).
func (cn clockNode) step(t *testing.T, g *game, d time.Duration) {
	t.Helper()
	for end := cn.clk.Now().Add(d); cn.clk.Now().Before(end); {
		before := g.stepped.Load()
		cn.clk.Advance(time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for g.stepped.Load() == before {
			select {
			case <-g.done:
				return
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the game did not tick at %v", cn.clk.Now())
			}
			time.Sleep(2 * time.Millisecond)
			if g.stepped.Load() == before {
				cn.clk.Advance(10 * time.Millisecond) // a stall re-arms at half a period
			}
		}
	}
}

// join seats account, ticking the game until the join is durable.
func (cn clockNode) join(t *testing.T, g *game, tenant, id, account string) int {
	t.Helper()
	done := make(chan error, 1)
	var slot int32
	go func() {
		r, err := cn.c.JoinGame(context.Background(), connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: tenant, GameId: id, AccountId: account, DisplayName: account}))
		if err == nil {
			slot = r.Msg.Slot
		}
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return int(slot)
		default:
		}
		cn.clk.Advance(time.Second / 35)
		time.Sleep(time.Millisecond)
	}
}

// attach opens account's frame stream as controller ctlID and waits until the
// node has attached it.
func attach(t *testing.T, ctx context.Context, c clusterv1connect.NodeServiceClient, tenant, id, account, ctlID string) *connect.ServerStreamForClient[clusterv1.StreamFramesResponse] {
	t.Helper()
	req := connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, AccountId: account})
	if ctlID != "" {
		req.Header().Set(ControllerHeader, ctlID)
	}
	s, err := c.StreamFrames(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() { // the first status follows the attach
		t.Fatalf("stream of %s: %v", account, s.Err())
	}
	return s
}

// attached reports whether a stream of the slot's player is attached.
func attached(g *game, slot int) bool {
	c := &g.slots[slot].ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur != nil && c.cur.streams > 0
}

func waitDetached(t *testing.T, g *game, slot int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); attached(g, slot); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("slot %d: the node did not see its stream end", slot)
		}
	}
}

// leaves returns the ticks of the leave events of each slot in the log, once
// want of them are durable.
func leaves(t *testing.T, tenant, id string, want int) map[int][]int64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, chunks, err := ReadLog(context.Background(), state, tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		got, n := map[int][]int64{}, 0
		for _, ch := range chunks {
			for _, e := range ch.Entries {
				if e.Event.Kind == abi.EventLeave {
					got[int(e.Event.Slot)] = append(got[int(e.Event.Slot)], e.Tick)
					n++
				}
			}
		}
		if n >= want || time.Now().After(deadline) {
			return got
		}
	}
}

// TestAbandonedPlayersLeave: a player whose streams are gone for the grace
// (or who never attached one) leaves the match through a leave event in the
// log, which replays to the hashes the owner recorded.
func TestAbandonedPlayersLeave(t *testing.T) {
	const tenant = "tenant-abandon"
	cn := startClockNode(t, "n-abandon", Config{AbandonGrace: 30 * time.Second, IdleEnd: time.Hour, HashEvery: 5})
	id := createGame(t, cn.c, tenant, 0)
	g, _ := cn.n.game(tenant, id)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ada := cn.join(t, g, tenant, id, "ada")
	bob := cn.join(t, g, tenant, id, "bob") // never attaches a stream
	sctx, drop := context.WithCancel(ctx)
	attach(t, sctx, cn.c, tenant, id, "ada", "")

	cn.step(t, g, 25*time.Second)
	if got := leaves(t, tenant, id, 0); len(got) != 0 {
		t.Fatalf("leaves before the grace: %v", got)
	}
	cn.step(t, g, 6*time.Second)
	if got := leaves(t, tenant, id, 1); len(got[bob]) != 1 || len(got[ada]) != 0 {
		t.Fatalf("30 s after joining without a stream: leaves %v, want one of bob's slot %d only", got, bob)
	}

	// Ada's stream drops: she leaves 30 s later, not before.
	drop()
	waitDetached(t, g, ada)
	cn.step(t, g, 29*time.Second)
	if got := leaves(t, tenant, id, 1); len(got[ada]) != 0 {
		t.Fatalf("ada left %v before her grace ended", got[ada])
	}
	cn.step(t, g, 2*time.Second)
	got := leaves(t, tenant, id, 2)
	if len(got[ada]) != 1 {
		t.Fatalf("31 s after ada's stream dropped: leaves %v, want one of slot %d", got, ada)
	}
	if info := g.info(); info.Players != 0 {
		t.Fatalf("players = %d after both left", info.Players)
	}
	// An abandoned player has no slot any more: a stream is refused.
	s, err := cn.c.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, AccountId: "ada"}))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeFailedPrecondition)

	// Replay and takeover see the same leaves: the log replays to the
	// recorded hashes.
	cn.step(t, g, 2*time.Second)
	spec, chunks, err := ReadLog(ctx, state, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, ch := range chunks {
		recorded += len(ch.Hashes)
	}
	inst, hashes, err := Replay(ctx, testEng, builtin.Arena, spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	if len(hashes) != recorded || recorded == 0 {
		t.Fatalf("replay checked %d hashes, %d recorded", len(hashes), recorded)
	}
	// The host's view rebuilt from the log (a takeover's) has both slots free.
	g2 := &game{n: cn.n, slots: []*slot{{}, {}, {}, {}, {}, {}, {}, {}}, accounts: map[string]int{}}
	g2.restore(chunks)
	if g2.players != 0 || len(g2.accounts) != 0 {
		t.Fatalf("restored from the log: %d players %v", g2.players, g2.accounts)
	}
}

// TestReattachWithinGraceKeepsTheSlot: a player whose stream comes back
// within the grace keeps the slot; the grace counts from the last drop.
func TestReattachWithinGraceKeepsTheSlot(t *testing.T) {
	const tenant = "tenant-reattach"
	cn := startClockNode(t, "n-reattach", Config{AbandonGrace: 30 * time.Second, IdleEnd: time.Hour})
	id := createGame(t, cn.c, tenant, 0)
	g, _ := cn.n.game(tenant, id)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ada := cn.join(t, g, tenant, id, "ada")
	s1ctx, drop1 := context.WithCancel(ctx)
	attach(t, s1ctx, cn.c, tenant, id, "ada", "")
	drop1()
	waitDetached(t, g, ada)
	cn.step(t, g, 20*time.Second)
	s2ctx, drop2 := context.WithCancel(ctx)
	attach(t, s2ctx, cn.c, tenant, id, "ada", "")
	cn.step(t, g, 20*time.Second) // 40 s after the first drop
	if got := leaves(t, tenant, id, 0); len(got) != 0 {
		t.Fatalf("ada re-attached within the grace but left: %v", got)
	}
	drop2()
	waitDetached(t, g, ada)
	cn.step(t, g, 25*time.Second)
	if got := leaves(t, tenant, id, 0); len(got) != 0 {
		t.Fatalf("ada left 25 s after her second drop: %v", got)
	}
	cn.step(t, g, 6*time.Second)
	if got := leaves(t, tenant, id, 1); len(got[ada]) != 1 {
		t.Fatalf("31 s after the second drop: leaves %v", got)
	}
}

// reportRecorder records the results a node reports.
type reportRecorder struct {
	mu    sync.Mutex
	final []string // match ids
}

func (r *reportRecorder) Report(_ context.Context, _, matchID string, _ int64, final bool, _ []*ludusv1.PlayerResult) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if final {
		r.final = append(r.final, matchID)
	}
	return nil
}

// TestIdleGameEnds: a game whose players all left ends IdleEnd later, ended
// (not failed), with the reason, and its result is reported.
func TestIdleGameEnds(t *testing.T) {
	const tenant = "tenant-idle"
	rec := &reportRecorder{}
	cn := startClockNode(t, "n-idle", Config{AbandonGrace: 30 * time.Second, IdleEnd: 60 * time.Second, Results: rec})
	id := "idle-" + time.Now().Format("150405.000000")
	id = strings.ReplaceAll(id, ".", "-")
	if _, err := cn.c.StartGame(context.Background(), connect.NewRequest(&clusterv1.StartGameRequest{
		TenantId: tenant, GameId: id, BuildId: arenaID, Seed: 7, Config: []byte(`{"bots":2}`), MatchCredential: "lmc_test"})); err != nil {
		t.Fatal(err)
	}
	g, _ := cn.n.game(tenant, id)
	cn.join(t, g, tenant, id, "ada") // and never streams: abandoned after 30 s
	cn.step(t, g, 31*time.Second)
	if got := leaves(t, tenant, id, 1); len(got) != 1 {
		t.Fatalf("ada did not leave: %v", got)
	}
	cn.step(t, g, 50*time.Second)
	if st := g.status.load().v; st.State != clusterstate.StateRunning {
		t.Fatalf("50 s without players: %+v, want still running", st)
	}
	cn.step(t, g, 15*time.Second)
	st := waitStatus(t, tenant, id, func(g clusterstate.Game) bool { return g.Status.Finished() })
	if st.Status.State != clusterstate.StateEnded || !strings.HasPrefix(st.Status.Message, "ended: no players for 60 s") {
		t.Fatalf("final status %+v, want ended: no players for 60 s", st.Status)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rec.mu.Lock()
		n := len(rec.final)
		rec.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("final results reported %d times, want once", n)
		}
	}
}

// TestOneControllerPerSlot: a second stream of the same player takes the
// slot over; the first ends with Aborted and its inputs are refused.
func TestOneControllerPerSlot(t *testing.T) {
	const tenant = "tenant-ctl"
	_, c := startNode(t, "n-ctl")
	id := createGame(t, c, tenant, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	join(t, c, tenant, id, "ada")

	inputs := func(ctlID string, seq uint64) error {
		st := c.Inputs(ctx)
		st.RequestHeader().Set(ControllerHeader, ctlID)
		defer st.CloseResponse()
		if err := st.Send(&clusterv1.InputsRequest{TenantId: tenant, GameId: id, AccountId: "ada", Seq: seq, Payload: []byte{1}}); err != nil {
			return err
		}
		// The node ends a refused stream once its request side is closed.
		_ = st.CloseRequest()
		_, err := st.Receive()
		return err
	}
	tabA := attach(t, ctx, c, tenant, id, "ada", "tab-a")
	if err := inputs("tab-a", 1); err != nil {
		t.Fatalf("input of the controlling tab: %v", err)
	}
	if err := inputs("tab-b", 2); err != nil {
		t.Fatalf("input of a Play whose frames are not attached yet: %v", err)
	}
	tabB := attach(t, ctx, c, tenant, id, "ada", "tab-b")
	for tabA.Receive() {
	}
	err := tabA.Err()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAborted || ce.Message() != "this player is now controlled from another window" {
		t.Fatalf("the replaced stream ended with %v, want Aborted: this player is now controlled from another window", err)
	}
	wantCode(t, inputs("tab-a", 3), connect.CodeAborted)
	if err := inputs("tab-b", 4); err != nil {
		t.Fatalf("input of the new controller: %v", err)
	}
	// Unary inputs name no stream: they pass.
	if _, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: tenant, GameId: id, AccountId: "ada", Seq: 5, Payload: []byte{1}})); err != nil {
		t.Fatal(err)
	}
	// The same controller re-attaching (a gateway following the game) does
	// not end its own older stream.
	tabB2 := attach(t, ctx, c, tenant, id, "ada", "tab-b")
	defer tabB2.Close()
	for frames := 0; frames < 3; {
		if !tabB.Receive() {
			t.Fatalf("tab b's first stream ended when it re-attached: %v", tabB.Err())
		}
		if tabB.Msg().GetFrame() != nil {
			frames++
		}
	}
}

// TestLobbyFields: a game says how many bots it has, who created it and when.
func TestLobbyFields(t *testing.T) {
	const tenant = "tenant-lobby"
	n, c := startNode(t, "n-lobby")
	before := time.Now()
	g, err := n.StartGame(context.Background(), clusterstate.GameSpec{TenantID: tenant, GameID: "lobby-1", BuildID: arenaID, Seed: 3,
		Config: []byte(`{"bots":3}`), HostName: "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	join(t, c, tenant, "lobby-1", "bob")
	info := waitRunning(t, c, tenant, "lobby-1").Game
	if info.Bots != 3 || info.HostName != "Ada" || info.CreatedAtUnixMs < before.UnixMilli() || info.CreatedAtUnixMs > time.Now().UnixMilli() {
		t.Fatalf("GameInfo bots %d host %q created %d; want 3, Ada, about %d", info.Bots, info.HostName, info.CreatedAtUnixMs, before.UnixMilli())
	}
	waitStatus(t, tenant, "lobby-1", func(cg clusterstate.Game) bool { return cg.Status.Players == 1 })
	stored, err := state.View().Game(context.Background(), tenant, "lobby-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Spec.Bots != 3 || stored.Spec.HostName != "Ada" || !stored.Spec.CreatedAt.Equal(g.spec.CreatedAt) {
		t.Fatalf("stored spec: bots %d host %q created %v", stored.Spec.Bots, stored.Spec.HostName, stored.Spec.CreatedAt)
	}
}
