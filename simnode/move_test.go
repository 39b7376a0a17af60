package simnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
)

// crash stops a node the way kill -9 would, as far as the fleet can tell: no
// more renewals (its lease expires after the TTL), no more appends, no clean-up.
func crash(n *Node) {
	n.sess.Load().Fence("crash")
	n.cancel()
}

func waitOwner(t *testing.T, tenant, game, node string) clusterstate.Game {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, err := state.View().Game(context.Background(), tenant, game)
		if err == nil && g.Owner == node {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("game %s never owned by %s (last %+v, %v)", game, node, g, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitRunning(t *testing.T, c clusterv1connect.NodeServiceClient, tenant, game string) *clusterv1.GetGameResponse {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := c.GetGame(context.Background(), connect.NewRequest(&clusterv1.GetGameRequest{TenantId: tenant, GameId: game}))
		if err == nil {
			return r.Msg
		}
		if time.Now().After(deadline) {
			t.Fatalf("game %s not running on the node: %v", game, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func join(t *testing.T, c clusterv1connect.NodeServiceClient, tenant, game, account string) int32 {
	t.Helper()
	r, err := c.JoinGame(context.Background(), connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: tenant, GameId: game, AccountId: account, DisplayName: account}))
	if err != nil {
		t.Fatal(err)
	}
	return r.Msg.Slot
}

// sendInputs sends inputs seq from..to and returns the acknowledged ones.
func sendInputs(c clusterv1connect.NodeServiceClient, tenant, game, account string, from, to uint64) []uint64 {
	var acked []uint64
	for seq := from; seq <= to; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: tenant, GameId: game, AccountId: account, Seq: seq, Payload: []byte{byte(seq) & 0x0f}}))
		cancel()
		if err == nil {
			acked = append(acked, r.Msg.AckedSeq)
		}
	}
	return acked
}

// checkLog verifies every acknowledged input is in the log exactly once and the
// log replays to every recorded state hash.
func checkLog(t *testing.T, tenant, game string, acked []uint64) {
	t.Helper()
	ctx := context.Background()
	spec, chunks, err := ReadLog(ctx, state, tenant, game)
	if err != nil {
		t.Fatal(err)
	}
	count := map[uint64]int{}
	for _, c := range chunks {
		for _, e := range c.Entries {
			if e.Event.Kind == abi.EventInput {
				count[e.Seq]++
			}
		}
	}
	for _, s := range acked {
		if count[s] != 1 {
			t.Fatalf("acknowledged input %d appears %d times in the log", s, count[s])
		}
	}
	for s, n := range count {
		if n > 1 {
			t.Fatalf("input %d applied %d times", s, n)
		}
	}
	inst, hashes, err := Replay(ctx, testEng, arenaWasm(), spec, chunks)
	if err != nil {
		t.Fatalf("replay of the moved game: %v", err)
	}
	inst.Close(ctx)
	if len(hashes) == 0 {
		t.Fatal("no state hash was checked")
	}
}

// TestHandoff: a running game moves to another node in one transaction; the new
// owner resumes it, its first frame equals what the old owner computes for that
// tick, and no acknowledged input is lost or doubled.
func TestHandoff(t *testing.T) {
	a, ca := startNode(t, "n-hand-a")
	b, cb := startNode(t, "n-hand-b")
	// The resumed game runs with the new node's per-match limits, not the
	// engine's defaults.
	b.cfg.CallDeadline = 77 * time.Millisecond
	ctx := context.Background()
	tenant := "tenant-h"
	id := createGame(t, ca, tenant, 3)
	join(t, ca, tenant, id, "acc-h")
	acked := sendInputs(ca, tenant, id, "acc-h", 1, 5)

	to, err := a.Handoff(ctx, tenant, id, "n-hand-b")
	if err != nil || to != "n-hand-b" {
		t.Fatalf("handoff: %v %v", to, err)
	}
	waitOwner(t, tenant, id, "n-hand-b")
	waitRunning(t, cb, tenant, id)
	if _, err := ca.GetGame(ctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: tenant, GameId: id})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("old owner still runs the game: %v", err)
	}
	if g, ok := b.game(tenant, id); !ok || g.inst.Deadline() != 77*time.Millisecond {
		t.Fatalf("the resumed game's call deadline is not the node's 77 ms (found %v)", ok)
	}
	// The player keeps their slot and sequence numbers on the new node.
	if s := join(t, cb, tenant, id, "acc-h"); s != 0 {
		t.Fatalf("slot after handoff %d, want 0", s)
	}
	acked = append(acked, sendInputs(cb, tenant, id, "acc-h", 3, 9)...) // 3..5 are re-sends

	stream, err := cb.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, AccountId: "acc-h"}))
	if err != nil {
		t.Fatal(err)
	}
	var first *clusterv1.StreamFramesResponse
	for stream.Receive() {
		if stream.Msg().GetFrame() != nil {
			first = stream.Msg()
			break
		}
	}
	stream.Close()
	if first == nil {
		t.Fatalf("no frame from the new owner: %v", stream.Err())
	}
	// What would the old owner have shown at that tick? Replay the log to it.
	tick := first.GetFrame().Tick
	time.Sleep(400 * time.Millisecond) // let the new owner's log cover the tick
	spec, chunks, err := ReadLog(ctx, state, tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := mustModule(t).Instantiate(ctx, spec.Seed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, spec.Seed, spec.Config); err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		e := 0
		for inst.Tick() < c.To && inst.Tick() < tick {
			var evs []abi.Event
			for e < len(c.Entries) && c.Entries[e].Tick == inst.Tick() {
				evs = append(evs, c.Entries[e].Event)
				e++
			}
			if _, err := inst.Step(ctx, evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	if inst.Tick() != tick {
		t.Fatalf("log covers tick %d, frame is at %d", inst.Tick(), tick)
	}
	want, err := inst.View(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if mod := mustModule(t); mod.HasRenderer {
		// The stream carries pixels: the module's rendering of the snapshot.
		r, err := mod.NewRenderer(ctx, engine.InstanceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		if want, err = r.Render(ctx, want); err != nil {
			t.Fatal(err)
		}
	}
	if string(want) != string(first.GetFrame().View) {
		t.Fatal("first frame after handoff differs from the frame the old owner computes for the same tick")
	}
	checkLog(t, tenant, id, acked)
}

// TestFailover: the owner dies without a word; once its lease expires another
// node claims the game, replays its log (every recorded hash matches) and
// resumes it; no acknowledged input is lost or applied twice.
func TestFailover(t *testing.T) {
	a, ca := startNode(t, "n-fail-a")
	b, cb := startNode(t, "n-fail-b")
	tenant := "tenant-x"
	id := createGame(t, ca, tenant, 3)
	join(t, ca, tenant, id, "acc-x")
	acked := sendInputs(ca, tenant, id, "acc-x", 1, 6)
	time.Sleep(1200 * time.Millisecond) // past a checkpoint (1 s in these tests)
	killed := time.Now()
	crash(a)
	waitOwner(t, tenant, id, "n-fail-b")
	r := waitRunning(t, cb, tenant, id)
	t.Logf("failover: game resumed on %s at tick %d, %v after the crash", r.Game.NodeId, r.Game.Tick, time.Since(killed).Round(time.Millisecond))
	if b.fromCheckpoint.Load() == 0 {
		t.Fatal("the arena exports save/load, yet the game was not resumed from its checkpoint")
	}
	// The client re-sends what was not acknowledged (here: everything from 4).
	acked = append(acked, sendInputs(cb, tenant, id, "acc-x", 4, 10)...)
	checkLog(t, tenant, id, acked)
}

// TestFailoverStaysInItsRegion: a game whose node dies resumes on a node of
// the region it was started in, where its players were sent, even when the
// fleet's order for it (rendezvous hashing) puts a node of another region
// first.
func TestFailoverStaysInItsRegion(t *testing.T) {
	a, ca := startNodeIn(t, "n-reg-eu-a", "eu", state, 3*time.Second)
	startNodeIn(t, "n-reg-eu-b", "eu", state, 3*time.Second)
	startNodeIn(t, "n-reg-us", "us", state, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A game id the fleet's plain order gives to the node in us: without
	// the region, the game would cross the ocean.
	var nodes []clusterstate.NodeInfo
	for len(nodes) != 3 {
		if ctx.Err() != nil {
			t.Fatalf("the three nodes never registered: %v", nodes)
		}
		time.Sleep(20 * time.Millisecond)
		all, _ := state.View().Nodes(ctx)
		nodes = nodes[:0]
		for _, n := range all {
			if strings.HasPrefix(n.ID, "n-reg-") {
				nodes = append(nodes, n)
			}
		}
	}
	id := ""
	for i := 0; id == ""; i++ {
		cand := fmt.Sprintf("g-region-%d", i)
		if r := fleet.Rank(nodes, cand, fleet.RankOptions{Exclude: "n-reg-eu-a"}); r[0].ID == "n-reg-us" {
			id = cand
		}
	}
	tenant := "tenant-r"
	if _, err := ca.StartGame(ctx, connect.NewRequest(&clusterv1.StartGameRequest{TenantId: tenant, GameId: id, BuildId: arenaID, Seed: 7})); err != nil {
		t.Fatal(err)
	}
	if g := waitOwner(t, tenant, id, "n-reg-eu-a"); g.Spec.Region != "eu" {
		t.Fatalf("the game's spec says region %q, want its node's (eu)", g.Spec.Region)
	}
	crash(a)
	waitOwner(t, tenant, id, "n-reg-eu-b")
}

// TestDrain: draining a node running 20 games hands every game to the others
// and loses none — nor any acknowledged input.
func TestDrain(t *testing.T) {
	a, ca := startNode(t, "n-drain-a")
	_, cb := startNode(t, "n-drain-b")
	tenant := "tenant-d"
	var ids []string
	acked := map[string][]uint64{}
	for i := 0; i < 20; i++ {
		id := createGame(t, ca, tenant, 2)
		ids = append(ids, id)
		if i%5 == 0 {
			join(t, ca, tenant, id, "acc-d")
			acked[id] = sendInputs(ca, tenant, id, "acc-d", 1, 3)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitOwner(t, tenant, id, "n-drain-b")
		waitRunning(t, cb, tenant, id)
	}
	if _, err := ca.StartGame(ctx, connect.NewRequest(&clusterv1.StartGameRequest{TenantId: tenant, GameId: "after-drain", BuildId: arenaID, Seed: 1})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a draining node accepted a game: %v", err)
	}
	for id, seqs := range acked {
		seqs = append(seqs, sendInputs(cb, tenant, id, "acc-d", 2, 5)...) // 2, 3 are re-sends
		checkLog(t, tenant, id, seqs)
	}
}

// TestMatchedGameSeatsOnlyItsPlayers: a game started with reserved accounts
// (the matchmaker's) seats only them, on its first node and on the node it
// moves to; reserved accounts that are not ids, or too many, are refused.
func TestMatchedGameSeatsOnlyItsPlayers(t *testing.T) {
	a, ca := startNode(t, "n-match-a")
	_, cb := startNode(t, "n-match-b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const tenant = "tenant-matched"
	start := func(id string, reserved []string) error {
		_, err := ca.StartGame(ctx, connect.NewRequest(&clusterv1.StartGameRequest{
			TenantId: tenant, GameId: id, BuildId: arenaID, Seed: 7, ReservedAccounts: reserved}))
		return err
	}
	tooMany := make([]string, 65)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("acc-%d", i)
	}
	for what, reserved := range map[string][]string{"not an id": {"acc-1", "a b"}, "empty": {""}, "65 accounts": tooMany} {
		if err := start("g-bad-reserved", reserved); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("reserved accounts %s: %v, want InvalidArgument", what, err)
		}
	}
	id := fmt.Sprintf("g-matched-%d", time.Now().UnixNano())
	if err := start(id, []string{"acc-1", "acc-2"}); err != nil {
		t.Fatal(err)
	}
	tryJoin := func(c clusterv1connect.NodeServiceClient, account string) error {
		_, err := c.JoinGame(ctx, connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: tenant, GameId: id, AccountId: account}))
		return err
	}
	err := tryJoin(ca, "acc-3")
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "matched game") {
		t.Fatalf("an unmatched account joining: %v, want PermissionDenied", err)
	}
	if err := tryJoin(ca, "acc-1"); err != nil {
		t.Fatalf("a matched account joining: %v", err)
	}
	if to, err := a.Handoff(ctx, tenant, id, "n-match-b"); err != nil || to != "n-match-b" {
		t.Fatalf("handoff: %v %v", to, err)
	}
	waitOwner(t, tenant, id, "n-match-b")
	waitRunning(t, cb, tenant, id)
	if err := tryJoin(cb, "acc-3"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("an unmatched account joining on the new node: %v, want PermissionDenied", err)
	}
	for _, acc := range []string{"acc-1", "acc-2"} {
		if err := tryJoin(cb, acc); err != nil {
			t.Fatalf("%s joining on the new node: %v", acc, err)
		}
	}
}
