package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

func sendInput(ctx context.Context, c *fakeCluster, ticket, game string, seq uint64) (*ludusv1.SendInputResponse, error) {
	resp, err := c.client(ticket).SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: game, Seq: seq, Payload: []byte{1}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// SendInput and JoinGame go to each game's owner as the watched directory
// says, without reading etcd per call.
func TestFakeSendInputRoutesFromDirectory(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	b := c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.addGame(tenantT1, "g2", "node-b")
	c.waitOwner(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g2", "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reads, ok := c.metric("ludus_gateway_etcd_reads_total")
	if !ok {
		t.Fatal("no ludus_gateway_etcd_reads_total in the gateway's registry")
	}
	for seq := uint64(1); seq <= 20; seq++ {
		game := "g1"
		if seq%2 == 0 {
			game = "g2"
		}
		resp, err := sendInput(ctx, c, ticketAlice, game, seq)
		if err != nil {
			t.Fatalf("input %d to %s: %v", seq, game, err)
		}
		if resp.AckedSeq != seq {
			t.Fatalf("input %d acked as %d", seq, resp.AckedSeq)
		}
	}
	join, err := c.client(ticketBob).JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: "g2"}))
	if err != nil {
		t.Fatal(err)
	}
	if join.Msg.Game.GetNodeId() != "node-b" || join.Msg.Slot != 1 {
		t.Fatalf("join answered %+v", join.Msg)
	}
	// The join registered Bob on the match's roster, so its result may credit him.
	if r := c.backend.roster("g2"); len(r) != 1 || r[0] == "" {
		t.Fatalf("roster of g2 after Bob's join = %q, want Bob's account", r)
	}
	var odd, even []uint64
	for s := uint64(1); s <= 20; s++ {
		if s%2 == 1 {
			odd = append(odd, s)
		} else {
			even = append(even, s)
		}
	}
	if got := a.gotSendInputs(); !slices.Equal(got, odd) {
		t.Fatalf("node-a got %v; want %v", got, odd)
	}
	if got := b.gotSendInputs(); !slices.Equal(got, even) {
		t.Fatalf("node-b got %v; want %v", got, even)
	}
	// A Play stream's frames and inputs are routed the same way.
	play, msgs := openPlay(t, ctx, c, ticketBob, "g2")
	defer play.CloseResponse()
	waitStatus(t, msgs, "node-b")
	for seq := uint64(1); seq <= 5; seq++ {
		if err := sendPlayInput(t, play, seq); err != nil {
			t.Fatal(err)
		}
	}
	if acks := collectAcks(t, msgs, 5, 5*time.Second, 0); !slices.Equal(acks, seqs(1, 5)) {
		t.Fatalf("Play acks %v", acks)
	}
	if got := b.gotInputs(); !slices.Equal(got, seqs(1, 5)) {
		t.Fatalf("node-b's Inputs got %v", got)
	}
	if after, _ := c.metric("ludus_gateway_etcd_reads_total"); after != reads {
		t.Fatalf("20 inputs, a join and a Play stream read etcd %v times; routing should read the directory", after-reads)
	}
	if got := c.metricWith("ludus_gateway_inputs_total", map[string]string{"tenant": tenantT1}); got != 25 {
		t.Fatalf("ludus_gateway_inputs_total = %v; want 25", got)
	}
}

// A game that does not exist, or exists in another tenant, is NotFound on
// every call, at once.
func TestFakeUnknownGameIsNotFound(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error, start time.Time) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%s: %v; want not_found", what, err)
		}
		if l := leaks(err.Error(), a); l != "" {
			t.Fatalf("%s: %v leaks %q", what, err, l)
		}
		within(t, what, time.Since(start), 0, time.Second)
	}
	start := time.Now()
	_, err := sendInput(ctx, c, ticketAlice, "nope", 1)
	check("SendInput to a game that does not exist", err, start)
	start = time.Now()
	_, err = sendInput(ctx, c, ticketEve, "g1", 1)
	check("SendInput to another tenant's game", err, start)
	start = time.Now()
	_, err = c.client(ticketAlice).JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: "nope"}))
	check("JoinGame", err, start)
	start = time.Now()
	stream, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: "nope"}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		t.Fatalf("StreamFrames of a game that does not exist sent %+v", stream.Msg())
	}
	check("StreamFrames", stream.Err(), start)
	start = time.Now()
	play, msgs := openPlay(t, ctx, c, ticketAlice, "nope")
	defer play.CloseResponse()
	for m := next(t, msgs, 5*time.Second); ; m = next(t, msgs, 5*time.Second) {
		if m.end {
			check("Play", m.err, start)
			break
		}
		t.Fatalf("Play of a game that does not exist sent %+v", m)
	}
	if got := a.gotSendInputs(); len(got) != 0 {
		t.Fatalf("node-a got inputs %v", got)
	}
}

// A game whose spec exists but whose owner key is gone is moving: SendInput
// keeps trying for the retry budget (4 s) and answers Unavailable, or
// succeeds as soon as an owner appears within it.
func TestFakeSendInputToMovingGame(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "lost", "")  // nobody claims it
	c.addGame(tenantT1, "found", "") // claimed after 500 ms
	c.waitNodes(1)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	wg.Add(1)
	var lostErr error
	var lostTook time.Duration
	go func() {
		defer wg.Done()
		start := time.Now()
		_, lostErr = sendInput(ctx, c, ticketAlice, "lost", 1)
		lostTook = time.Since(start)
	}()
	start := time.Now()
	claimed := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		c.setOwner(tenantT1, "found", "node-a")
		claimed <- time.Now()
	}()
	resp, err := sendInput(ctx, c, ticketBob, "found", 7)
	if err != nil {
		t.Fatalf("input to a game claimed 500 ms into the call: %v", err)
	}
	if resp.AckedSeq != 7 {
		t.Fatalf("acked %d", resp.AckedSeq)
	}
	within(t, "an input to a game claimed after 500 ms", time.Since(start), 450*time.Millisecond, 2*time.Second)
	within(t, "the input after the claim", time.Since(<-claimed), 0, time.Second)
	if got := a.gotSendInputs(); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("node-a got %v", got)
	}

	wg.Wait()
	if connect.CodeOf(lostErr) != connect.CodeUnavailable {
		t.Fatalf("input to a game without an owner: %v; want unavailable", lostErr)
	}
	within(t, "giving up on a game without an owner", lostTook, documentedRetryBudget-100*time.Millisecond, documentedRetryBudget+2*time.Second)
	if l := leaks(lostErr.Error(), a); l != "" {
		t.Fatalf("%v leaks %q", lostErr, l)
	}
}

// The directory says node-a owns the game, but node-a answers NotFound (with
// its id and address in the message): the gateway retries and, after the
// retry budget, answers Unavailable without the node's message.
func TestFakeSendInputNodeLostGame(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	a.disown(tenantT1, "g1")
	var calls atomic.Int64
	a.set(func(n *fakeNode) {
		n.sendInputHook = func(ctx context.Context, req *clusterv1.SendInputRequest) (*clusterv1.SendInputResponse, error) {
			calls.Add(1)
			return nil, a.notHere(req.TenantId, req.GameId)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	_, err := sendInput(ctx, c, ticketAlice, "g1", 1)
	took := time.Since(start)
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("input to a node that lost the game: %v; want unavailable", err)
	}
	if l := leaks(err.Error(), a); l != "" {
		t.Fatalf("%v leaks %q", err, l)
	}
	within(t, "giving up on a node that lost the game", took, documentedRetryBudget-100*time.Millisecond, documentedRetryBudget+2*time.Second)
	if n := calls.Load(); n < 3 {
		t.Fatalf("node-a was asked %d times; the gateway should retry", n)
	}
}

// A call in flight to node-a when the owner key moves to node-b is abandoned
// at once and re-sent to node-b: the input is acknowledged well before
// nodeCallTimeout.
func TestFakeSendInputAbandonsFormerOwner(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	b := c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	c.waitNodes(2)
	started := make(chan struct{})
	abandoned := make(chan error, 1)
	a.set(func(n *fakeNode) {
		n.sendInputHook = func(ctx context.Context, req *clusterv1.SendInputRequest) (*clusterv1.SendInputResponse, error) {
			close(started)
			<-ctx.Done() // a node that will never answer (frozen, or slow to notice it lost the game)
			abandoned <- ctx.Err()
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	type result struct {
		resp *ludusv1.SendInputResponse
		err  error
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		resp, err := sendInput(ctx, c, ticketAlice, "g1", 42)
		done <- result{resp, err, time.Now()}
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the input never reached node-a")
	}
	movedAt := time.Now()
	c.moveOwner(tenantT1, "g1", "node-a", "node-b")
	var r result
	select {
	case r = <-done:
	case <-time.After(7 * time.Second): // nodeCallTimeout is 5 s
		t.Fatal("no answer")
	}
	if r.err != nil {
		t.Fatalf("input re-sent to the new owner: %v", r.err)
	}
	if r.resp.AckedSeq != 42 {
		t.Fatalf("acked %d", r.resp.AckedSeq)
	}
	within(t, "re-sending to the new owner", r.at.Sub(movedAt), 0, time.Second)
	if got := b.gotSendInputs(); !slices.Equal(got, []uint64{42}) {
		t.Fatalf("node-b got %v", got)
	}
	select {
	case err := <-abandoned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the call to node-a ended with %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the call to node-a was not abandoned")
	}
}

// Gateway.Nodes (placement, the autoscale webhook and its gauge, called on
// every request or scrape) answers from the watched directory: no etcd read
// per call, and a node's change is seen.
func TestFakeNodesFromDirectory(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	c.addNode(clusterstate.NodeInfo{ID: "node-a", Region: "eu"})
	c.addNode(clusterstate.NodeInfo{ID: "node-b", Region: "us"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := func() []string {
		nodes, err := c.gw.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range nodes {
			out = append(out, n.ID+"/"+n.Region)
		}
		slices.Sort(out)
		return out
	}
	// Until the directory itself answers with both: a call that read no
	// etcd. Before its first load (started with the gateway, maybe still in
	// flight) calls read etcd, and a load that read etcd before node-b was
	// put answers without it until the watch brings node-b.
	fromDirectory := func() ([]string, bool) {
		before, _ := c.metric("ludus_gateway_etcd_reads_total")
		got := ids()
		after, _ := c.metric("ludus_gateway_etcd_reads_total")
		return got, after == before
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		got, cached := fromDirectory()
		if cached && slices.Equal(got, []string{"node-a/eu", "node-b/us"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %v (from the directory: %v), want node-a/eu and node-b/us from the directory", got, cached)
		}
		time.Sleep(20 * time.Millisecond)
	}
	reads, _ := c.metric("ludus_gateway_etcd_reads_total")
	for range 50 {
		if got := ids(); len(got) != 2 {
			t.Fatalf("nodes %v", got)
		}
	}
	if after, _ := c.metric("ludus_gateway_etcd_reads_total"); after != reads {
		t.Fatalf("50 calls of Nodes read etcd %v times; want the directory's answer", after-reads)
	}
}
