package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// openPlay opens a Play stream on game and waits for its first status (the
// stream is attached to the owner).
func openPlay(t *testing.T, ctx context.Context, c *fakeCluster, ticket, game string) (*connect.BidiStreamForClient[ludusv1.PlayRequest, ludusv1.PlayResponse], <-chan streamMsg) {
	t.Helper()
	stream := c.client(ticket).Play(ctx)
	if err := stream.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: game}}}); err != nil {
		t.Fatal(err)
	}
	return stream, pumpPlay(stream)
}

func sendPlayInput(t *testing.T, stream *connect.BidiStreamForClient[ludusv1.PlayRequest, ludusv1.PlayResponse], seq uint64) error {
	t.Helper()
	return stream.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: seq, Payload: []byte{byte(seq)}}}})
}

// waitStatus reads until a status of node arrives.
func waitStatus(t *testing.T, msgs <-chan streamMsg, node string) {
	t.Helper()
	for {
		m := next(t, msgs, 5*time.Second)
		if m.end {
			t.Fatalf("the stream ended before a status of %s: %v", node, m.err)
		}
		if m.status != nil && m.status.NodeId == node && m.status.State == clusterstate.StateRunning {
			return
		}
	}
}

// collectAcks reads the stream until want acks arrived, then for settle more;
// it returns every ack seq in order of arrival.
func collectAcks(t *testing.T, msgs <-chan streamMsg, want int, d, settle time.Duration) []uint64 {
	t.Helper()
	var acks []uint64
	deadline := time.After(d)
	var quiet <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return acks
			}
			if m.end {
				if len(acks) < want {
					t.Fatalf("the stream ended after acks %v: %v", acks, m.err)
				}
				return acks
			}
			if m.ack != nil {
				acks = append(acks, m.ack.AckedSeq)
				if len(acks) == want {
					quiet = time.After(settle)
				}
			}
		case <-quiet:
			return acks
		case <-deadline:
			t.Fatalf("after %v the client has acks %v; want %d", d, acks, want)
		}
	}
}

func seqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// A Play stream sends inputs 1..20; the owner acknowledges 1..8 and then its
// Inputs stream fails as the game moves to node-b. node-b receives exactly
// the unacknowledged inputs, 9..20, first and in order, and the client gets
// one ack per input, in order, each once.
func TestFakePlayRedeliversUnacked(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	b := c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	acked8 := make(chan struct{}) // closed when the client has ack 8
	a.set(func(n *fakeNode) {
		n.inputsFailAfter = 8
		n.onInputsFail = func() {
			// node-a stops running the game now (a retry to it is refused); the
			// owner key moves later, once the gateway has read ack 8 and
			// passed it on (a move seen first would cancel the upstream before
			// ack 8 is read, and 8 would rightly be re-sent). Waiting for the
			// client's ack, not a fixed time, keeps a loaded machine from
			// reordering them.
			a.disown(tenantT1, "g1")
			go func() {
				select {
				case <-acked8:
				case <-time.After(5 * time.Second):
				}
				c.setOwner(tenantT1, "g1", "node-b")
				a.endStreams(endMoved)
			}()
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, upstream := openPlay(t, ctx, c, ticketAlice, "g1")
	msgs := make(chan streamMsg, 64)
	go func() {
		defer close(msgs)
		seen := false
		for m := range upstream {
			if m.ack != nil && m.ack.AckedSeq == 8 && !seen {
				seen = true
				close(acked8)
			}
			msgs <- m
		}
	}()
	defer stream.CloseResponse()
	waitStatus(t, msgs, "node-a")
	for seq := uint64(1); seq <= 20; seq++ {
		if err := sendPlayInput(t, stream, seq); err != nil {
			t.Fatalf("send %d: %v", seq, err)
		}
	}
	acks := collectAcks(t, msgs, 20, 10*time.Second, 300*time.Millisecond)
	if !slices.Equal(acks, seqs(1, 20)) {
		t.Fatalf("the client's acks: %v; want 1..20 once each, in order", acks)
	}
	var aAcks []uint64
	a.snapshot(func(n *fakeNode) { aAcks = slices.Clone(n.acks) })
	if !slices.Equal(aAcks, seqs(1, 8)) {
		t.Fatalf("node-a acknowledged %v; want 1..8", aAcks)
	}
	got := b.gotInputs()
	if len(got) < 12 || !slices.Equal(got[:12], seqs(9, 20)) {
		t.Fatalf("node-b received %v; want 9..20 first", got)
	}
	for _, s := range got[12:] {
		if s < 9 || s > 20 {
			t.Fatalf("node-b received %v: %d after 9..20 is no re-send of an unacknowledged input", got, s)
		}
	}
	if err := stream.CloseRequest(); err != nil {
		t.Fatal(err)
	}
}

// A refusal the client must handle (not joined) ends the Play stream with the
// node's code and message, and nothing of the node's address.
func TestFakePlayRefusalEndsStream(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	a.set(func(n *fakeNode) {
		n.inputsRefuse = connect.NewError(connect.CodeFailedPrecondition, errors.New("join the game before sending input or streaming its frames"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, msgs := openPlay(t, ctx, c, ticketAlice, "g1")
	defer stream.CloseResponse()
	waitStatus(t, msgs, "node-a")
	if err := sendPlayInput(t, stream, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		m := next(t, msgs, 5*time.Second)
		if m.ack != nil {
			t.Fatalf("a refused input was acknowledged: %+v", m.ack)
		}
		if !m.end {
			continue
		}
		if connect.CodeOf(m.err) != connect.CodeFailedPrecondition || !strings.Contains(m.err.Error(), "join the game") {
			t.Fatalf("the stream ended with %v; want failed_precondition: join the game…", m.err)
		}
		if l := leaks(m.err.Error(), a); l != "" {
			t.Fatalf("%v leaks %q", m.err, l)
		}
		within(t, "ending the stream after a refusal", time.Since(start), 0, 2*time.Second)
		return
	}
}

// The owner freezes (SIGSTOP, a partition): its lease expires, node-b claims
// the game. The frame stream re-attaches to node-b after 3 s of silence (on
// the gateway's fake clock); the inputs waiting for their acks must follow it
// there and be acknowledged.
func TestFakePlayInputsFollowFrozenOwner(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	c := newFakeClusterClock(t, Limits{}, clk)
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	b := c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, msgs := openPlay(t, ctx, c, ticketAlice, "g1")
	defer stream.CloseResponse()
	waitStatus(t, msgs, "node-a")
	for seq := uint64(1); seq <= 3; seq++ {
		if err := sendPlayInput(t, stream, seq); err != nil {
			t.Fatal(err)
		}
	}
	if acks := collectAcks(t, msgs, 3, 5*time.Second, 0); !slices.Equal(acks, seqs(1, 3)) {
		t.Fatalf("acks before the freeze: %v", acks)
	}
	var streamsBefore int
	a.snapshot(func(n *fakeNode) { streamsBefore = n.inputStreams })
	a.freeze()
	for seq := uint64(4); seq <= 6; seq++ {
		if err := sendPlayInput(t, stream, seq); err != nil {
			t.Fatal(err)
		}
	}
	c.del(clusterstate.OwnerKey(tenantT1, "g1")) // node-a's lease expired
	c.setOwner(tenantT1, "g1", "node-b")         // node-b took the game over

	// The gateway's clock runs (fast) until the acks arrive: the frame
	// stream's silence timeout and the inputs' backoff pass on it.
	var acks []uint64
	reattached := false
	start := clk.Now()
	drove := false
	defer func() {
		if !drove {
			var reopened, bStreams int
			a.snapshot(func(n *fakeNode) { reopened = n.inputStreams - streamsBefore })
			b.snapshot(func(n *fakeNode) { bStreams = n.inputStreams })
			t.Logf("%v after node-a froze: frames re-attached to node-b: %v; acks %v (want 4..6); "+
				"Inputs streams opened to the frozen node-a after the freeze: %d, to node-b: %d; node-b received inputs %v",
				clk.Now().Sub(start), reattached, acks, reopened, bStreams, b.gotInputs())
		}
	}()
	clk.Drive(t, 50*time.Millisecond, "node-b acknowledges inputs 4..6", func() bool {
		for {
			select {
			case m := <-msgs:
				switch {
				case m.end:
					t.Fatalf("the stream ended: %v", m.err)
				case m.ack != nil:
					acks = append(acks, m.ack.AckedSeq)
				case m.status != nil && m.status.PreviousNodeId == "node-a":
					reattached = true
				}
			default:
				return len(acks) >= 3
			}
		}
	})
	drove = true
	if took := clk.Now().Sub(start); took > documentedSilence+2*time.Second {
		t.Fatalf("the acks came %v after node-a froze (gateway clock); want within the %v silence timeout and a little", took, documentedSilence)
	}
	if !slices.Equal(acks, seqs(4, 6)) {
		t.Fatalf("acks after the takeover: %v; want 4..6", acks)
	}
	if got := b.gotInputs(); len(got) < 3 || !slices.Equal(got[:3], seqs(4, 6)) {
		t.Fatalf("node-b received %v; want 4..6 first", got)
	}
}
