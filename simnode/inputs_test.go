package simnode

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/sdk/abi"
)

// startModuleGame starts a game of the given build with one joined player.
func startModuleGame(t *testing.T, c clusterv1connect.NodeServiceClient, tenant, build, config string) string {
	t.Helper()
	gameSeq++
	id := "in" + time.Now().Format("150405.000000000")[7:] + string(rune('a'+gameSeq%26))
	ctx := context.Background()
	if _, err := c.StartGame(ctx, connect.NewRequest(&clusterv1.StartGameRequest{
		TenantId: tenant, GameId: id, BuildId: build, Seed: 7, Config: []byte(config)})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JoinGame(ctx, connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: tenant, GameId: id, AccountId: "acc-1", DisplayName: "ada"})); err != nil {
		t.Fatal(err)
	}
	return id
}

type sent struct {
	resp *clusterv1.SendInputResponse
	err  error
}

// sendOrdered sends inputs concurrently but makes each reach the node after
// the one before it (the next is sent once the node holds the previous one
// in its inbox or window), like a client with several calls in flight whose
// calls overtake each other.
func sendOrdered(t *testing.T, c clusterv1connect.NodeServiceClient, tenant, game string, seqs ...uint64) []sent {
	t.Helper()
	out := make([]sent, len(seqs))
	var wg sync.WaitGroup
	for i, seq := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: tenant, GameId: game, AccountId: "acc-1", Seq: seq, Payload: []byte{byte(seq)}}))
			if err == nil {
				out[i].resp = r.Msg
			}
			out[i].err = err
		}()
		// Arrive in the given order, all within one flush interval.
		time.Sleep(15 * time.Millisecond)
	}
	wg.Wait()
	return out
}

// loggedSeqs returns the input seqs in the game's log, in log order.
func loggedSeqs(t *testing.T, tenant, game string) []uint64 {
	t.Helper()
	_, chunks, err := ReadLog(context.Background(), state, tenant, game)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, ch := range chunks {
		for _, e := range ch.Entries {
			if e.Event.Kind == abi.EventInput {
				seqs = append(seqs, e.Seq)
			}
		}
	}
	return seqs
}

// Finding 1 of the chaos run: seq 2, then 1, then 3 were all answered OK while
// the log held only 2 and 3. In an event game every input now applies once,
// in seq order: 2 waits for 1.
func TestEventInputsApplyInSeqOrder(t *testing.T) {
	_, c := startNode(t, "n-inputs-event")
	id := startModuleGame(t, c, "tenant-ev", pongID, `{}`)
	got := sendOrdered(t, c, "tenant-ev", id, 2, 1, 3)
	for i, want := range []uint64{2, 1, 3} {
		if got[i].err != nil {
			t.Fatalf("input %d: %v", want, got[i].err)
		}
		if got[i].resp.AckedSeq != want || got[i].resp.SupersededBySeq != 0 {
			t.Fatalf("input %d answered %+v; want acked_seq %d, not superseded", want, got[i].resp, want)
		}
	}
	if logged := loggedSeqs(t, "tenant-ev", id); len(logged) != 3 || logged[0] != 1 || logged[1] != 2 || logged[2] != 3 {
		t.Fatalf("log holds inputs %v; want [1 2 3]", logged)
	}
	// A re-send of an applied input is acknowledged again and not re-applied.
	again := sendOrdered(t, c, "tenant-ev", id, 2)
	if again[0].err != nil || again[0].resp.AckedSeq != 2 {
		t.Fatalf("re-sent input 2: %+v %v", again[0].resp, again[0].err)
	}
	if logged := loggedSeqs(t, "tenant-ev", id); len(logged) != 3 {
		t.Fatalf("a re-sent input was applied twice: log %v", logged)
	}
}

// An input of an event game whose predecessor never arrives is refused with
// Aborted and an InputGap detail naming the missing seq, never acknowledged.
func TestEventInputGapIsRefused(t *testing.T) {
	_, c := startNode(t, "n-inputs-gap")
	id := startModuleGame(t, c, "tenant-gap", pongID, `{}`)
	if r := sendOrdered(t, c, "tenant-gap", id, 1); r[0].err != nil {
		t.Fatal(r[0].err)
	}
	for _, seq := range []uint64{4, 1000} { // inside the window (waits, then refused) and far beyond it
		start := time.Now()
		r := sendOrdered(t, c, "tenant-gap", id, seq)
		if connect.CodeOf(r[0].err) != connect.CodeAborted {
			t.Fatalf("input %d with 2 and 3 missing: %+v %v; want Aborted", seq, r[0].resp, r[0].err)
		}
		var ce *connect.Error
		if !errors.As(r[0].err, &ce) || len(ce.Details()) != 1 {
			t.Fatalf("input %d: no InputGap detail in %v", seq, r[0].err)
		}
		v, err := ce.Details()[0].Value()
		gap, ok := v.(*ludusv1.InputGap)
		if err != nil || !ok || gap.MissingSeq != 2 || gap.RefusedSeq != seq {
			t.Fatalf("input %d: detail %v %v; want missing 2", seq, v, err)
		}
		if seq == 4 && time.Since(start) < gapTimeout/2 {
			t.Fatalf("input 4 refused after %v, before its gap could fill", time.Since(start))
		}
	}
	if logged := loggedSeqs(t, "tenant-gap", id); len(logged) != 1 {
		t.Fatalf("log holds %v; refused inputs must not be applied", logged)
	}
	// Filling the gap then works.
	for _, r := range sendOrdered(t, c, "tenant-gap", id, 3, 2) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if logged := loggedSeqs(t, "tenant-gap", id); len(logged) != 3 || logged[1] != 2 || logged[2] != 3 {
		t.Fatalf("log holds %v; want [1 2 3]", logged)
	}
}

// In a state game (the arena's held-buttons mask) a late lower seq is not
// applied, and the reply says so and by which seq: no OK means "applied" when
// it was not.
func TestStateInputSupersededIsSaidSo(t *testing.T) {
	n, c := startNode(t, "n-inputs-state")
	id := startModuleGame(t, c, "tenant-st", arenaID, `{"bots":0}`)
	g, _ := n.game("tenant-st", id)
	if g.spec.InputKind != abi.InputState {
		t.Fatalf("the arena module declares input_kind %q; its held-buttons mask is a state input", g.spec.InputKind)
	}
	got := sendOrdered(t, c, "tenant-st", id, 2, 1, 3)
	want := []struct{ acked, superseded uint64 }{{2, 0}, {1, 2}, {3, 0}}
	for i, w := range want {
		if got[i].err != nil {
			t.Fatal(got[i].err)
		}
		if got[i].resp.AckedSeq != w.acked || got[i].resp.SupersededBySeq != w.superseded {
			t.Fatalf("reply %d: %+v; want acked %d superseded_by %d", i, got[i].resp, w.acked, w.superseded)
		}
	}
	logged := loggedSeqs(t, "tenant-st", id)
	if len(logged) != 2 || logged[0] != 2 || logged[1] != 3 {
		t.Fatalf("log holds %v; want [2 3] (1 was superseded)", logged)
	}
}

// Finding 2: the node's Inputs stream pipelines a player's inputs, so 60
// inputs sent back to back are all acknowledged within a few flushes, in
// order, instead of one flush (250 ms) each.
func TestInputsStreamPipelines(t *testing.T) {
	_, c := startNode(t, "n-inputs-stream")
	id := startModuleGame(t, c, "tenant-pipe", pongID, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := c.Inputs(ctx)
	if err := st.Send(&clusterv1.InputsRequest{TenantId: "tenant-pipe", GameId: id, AccountId: "acc-1"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const count = 60
	go func() {
		for seq := uint64(1); seq <= count; seq++ {
			if st.Send(&clusterv1.InputsRequest{Seq: seq, Payload: []byte{byte(seq)}}) != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		_ = st.CloseRequest()
	}()
	for want := uint64(1); want <= count; want++ {
		r, err := st.Receive()
		if err != nil {
			t.Fatalf("ack %d: %v", want, err)
		}
		if r.AckedSeq != want {
			t.Fatalf("ack %d arrived as %d", want, r.AckedSeq)
		}
	}
	took := time.Since(start)
	if took > 5*time.Second {
		t.Fatalf("60 pipelined inputs took %v to be acknowledged", took)
	}
	t.Logf("60 inputs acknowledged in %v", took)
	if logged := loggedSeqs(t, "tenant-pipe", id); len(logged) != count {
		t.Fatalf("log holds %d inputs, want %d", len(logged), count)
	}
	// A stream naming no account is refused.
	bad := c.Inputs(ctx)
	_ = bad.Send(&clusterv1.InputsRequest{TenantId: "tenant-pipe", GameId: id})
	if _, err := bad.Receive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Inputs without an account: %v, want InvalidArgument", err)
	}
}

// Finding 4: a node that cannot make its log durable stops stepping within
// MaxSpeculation of the last durable chunk, so a player can never see more
// than that rolled back when the game resumes elsewhere.
func TestSpeculationIsBounded(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir + "/etcd", NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := es.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The node fences itself 2 s after etcd goes; the test looks before that.
	n, c := startNodeOn(t, "n-speculate", clusterstate.New(cli), 3*time.Second)
	id := createGame(t, c, "tenant-spec", 2)
	g, _ := n.game("tenant-spec", id)
	time.Sleep(500 * time.Millisecond)
	es.Close() // etcd is gone: nothing more becomes durable
	// Well past the bound, and before the watchdog fences the node (2/3 TTL).
	time.Sleep(1200 * time.Millisecond)
	ahead := g.stepped.Load() - g.durableTick.Load()
	if ahead > g.speculation || g.stalls.Load() == 0 {
		t.Fatalf("1.2 s after etcd went away the game is %d ticks past its durable log (bound %d, %d stalls)", ahead, g.speculation, g.stalls.Load())
	}
	t.Logf("stopped %d ticks past the durable log (bound %d ticks = %v)", ahead, g.speculation, n.cfg.MaxSpeculation)
	_ = os.RemoveAll(dir)
}

// A game that catches up on a late schedule steps a burst of ticks within one
// FlushInterval. When those unflushed ticks alone reach MaxSpeculation, the
// game must still hand them to the log writer: it used to wait for a commit
// that nothing would ever make (only a stepped tick flushed), and froze for
// good while the node and etcd were healthy — under a loaded CI run, a
// spectator saw the arena stop at tick 216.
func TestSpeculationBoundAfterABurstDoesNotFreezeTheGame(t *testing.T) {
	// 300 ms is 10 ticks at 35 Hz: a burst of 14 ticks after a flush reaches it.
	cn := startClockNode(t, "n-burst", Config{MaxSpeculation: 300 * time.Millisecond, FlushInterval: 250 * time.Millisecond})
	id := createGame(t, cn.c, "tenant-burst", 2)
	g, ok := cn.n.game("tenant-burst", id)
	if !ok {
		t.Fatal("the game is not on the node")
	}
	waitStepped := func(want int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); g.stepped.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the game stepped %d ticks, want %d", g.stepped.Load(), want)
			}
		}
	}
	cn.clk.Advance(240 * time.Millisecond) // 8 ticks, within one flush interval
	waitStepped(8)
	// 400 ms late, less than the schedule's re-base lag: the game steps the
	// missed ticks back to back, flushing only at the first.
	cn.clk.Advance(400 * time.Millisecond)
	cn.clk.Drive(t, 5*time.Millisecond, "the game steps 100 ticks", func() bool { return g.stepped.Load() >= 100 })
	if g.stalls.Load() == 0 {
		t.Fatal("the game never waited for its log: the test did not reach the bound it is about")
	}
	t.Logf("100 ticks stepped; %d ticks held back on the way", g.stalls.Load())
}

// TestInputLogShare: a player's inputs past their share of the game's input
// log (Config.MaxGameInputBytes over the seats) are refused with
// ResourceExhausted, saying so; the game and the other players go on.
func TestInputLogShare(t *testing.T) {
	n, c := startNode(t, "n-share")
	n.cfg.MaxGameInputBytes = 4096 // arena: 8 seats, 512 bytes each
	tenant := "tenant-share"
	game := createGame(t, c, tenant, 0)
	join(t, c, tenant, game, "ada")
	join(t, c, tenant, game, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(account string, seq uint64) error {
		_, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: tenant, GameId: game, AccountId: account, Seq: seq,
			Payload: make([]byte, 100)}))
		return err
	}
	for seq := uint64(1); seq <= 4; seq++ { // 4 × (100 + 16) = 464 bytes
		if err := send("ada", seq); err != nil {
			t.Fatalf("input %d within the share: %v", seq, err)
		}
	}
	err := send("ada", 5)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "the most one player may send in one game") {
		t.Fatalf("an input past the share: %v, want ResourceExhausted saying why", err)
	}
	if err := send("bob", 1); err != nil {
		t.Fatalf("another player: %v", err)
	}
	// A re-send of an input already logged costs nothing and is acknowledged.
	if err := send("ada", 4); err != nil {
		t.Fatalf("a re-send after the share was used: %v", err)
	}

	// Handed to another node, the game counts on from its log: ada's share
	// stays used, bob's has room.
	b, cb := startNode(t, "n-share-b")
	b.cfg.MaxGameInputBytes = 4096
	if to, err := n.Handoff(ctx, tenant, game, "n-share-b"); err != nil || to != "n-share-b" {
		t.Fatalf("handoff: %v %v", to, err)
	}
	waitOwner(t, tenant, game, "n-share-b")
	waitRunning(t, cb, tenant, game)
	c = cb
	err = send("ada", 5)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "reached 464 bytes") {
		t.Fatalf("an input past the share on the new node: %v, want ResourceExhausted at 464 bytes", err)
	}
	if err := send("bob", 2); err != nil {
		t.Fatalf("another player on the new node: %v", err)
	}
}
