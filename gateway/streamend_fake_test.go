package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// pumpSpectate reads a Spectate stream into a channel until it ends.
func pumpSpectate(s *connect.ServerStreamForClient[ludusv1.SpectateResponse]) <-chan streamMsg {
	ch := make(chan streamMsg, 4096)
	go func() {
		defer close(ch)
		for s.Receive() {
			m := s.Msg()
			ch <- streamMsg{frame: m.GetFrame(), status: m.GetStatus(), at: time.Now()}
		}
		ch <- streamMsg{end: true, err: s.Err(), at: time.Now()}
	}()
	return ch
}

// streamKinds opens each kind of frame stream on game as alice.
var streamKinds = []struct {
	name string
	open func(t *testing.T, ctx context.Context, c *fakeCluster, game string) <-chan streamMsg
}{
	{"StreamFrames", func(t *testing.T, ctx context.Context, c *fakeCluster, game string) <-chan streamMsg {
		s, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: game}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return pumpFrames(s)
	}},
	{"Spectate", func(t *testing.T, ctx context.Context, c *fakeCluster, game string) <-chan streamMsg {
		s, err := c.client(ticketAlice).Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: game}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return pumpSpectate(s)
	}},
	{"Play", func(t *testing.T, ctx context.Context, c *fakeCluster, game string) <-chan streamMsg {
		s, msgs := openPlay(t, ctx, c, ticketAlice, game)
		t.Cleanup(func() { s.CloseResponse() })
		return msgs
	}},
}

// streamEnd reads the stream to its end and returns the end and the last
// status before it. No frame may come after a status of state after.
func streamEnd(t *testing.T, msgs <-chan streamMsg, after string) (streamMsg, *ludusv1.Status) {
	t.Helper()
	var last *ludusv1.Status
	for {
		m := next(t, msgs, 5*time.Second)
		switch {
		case m.end:
			return m, last
		case m.status != nil:
			last = m.status
		case m.frame != nil && last != nil && last.State == after:
			t.Fatalf("a frame (tick %d) after the %q status", m.frame.Tick, after)
		}
	}
}

// A handoff whose resume fails: node-a hands the game to node-b, which claims
// it, cannot resume it (a desync) and marks it failed with the reason. Every
// kind of stream, migrating meanwhile, gets a last Status "failed" with that
// reason and ends with FailedPrecondition saying it; a unary call to the game
// hears the same reason.
func TestFakeStreamEndsWhenResumeFails(t *testing.T) {
	t.Parallel()
	const reason = "match failed: node node-b could not resume it: desync on resume at tick 812: state hash 5a1f != 93c0"
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeCluster(t, Limits{})
			a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
			c.addGame(tenantT1, "g1", "node-a")
			c.waitOwner(tenantT1, "g1", "node-a")
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			msgs := k.open(t, ctx, c, "g1")
			waitStatus(t, msgs, "node-a")

			// node-b joins and takes the game over: its claim is in etcd, but
			// it does not serve the game while it replays the log.
			c.addNode(clusterstate.NodeInfo{ID: "node-b"})
			c.waitNodes(2)
			a.disown(tenantT1, "g1")
			c.put(clusterstate.OwnerKey(tenantT1, "g1"), clusterstate.OwnerValue("node-b", "claim-resume"))
			a.endStreams(endMoved)
			for {
				m := next(t, msgs, 5*time.Second)
				if m.end {
					t.Fatalf("the stream ended at the handoff: %v", m.err)
				}
				if m.status != nil && m.status.State == "migrating" {
					break
				}
			}
			c.failGame(tenantT1, "g1", "node-b", reason)

			end, last := streamEnd(t, msgs, "migrating")
			if last == nil || last.State != clusterstate.StateFailed || last.Message != reason {
				t.Fatalf("the last status: %+v; want state failed with the reason", last)
			}
			if connect.CodeOf(end.err) != connect.CodeFailedPrecondition || !strings.Contains(end.err.Error(), reason) {
				t.Fatalf("the stream ended with %v; want failed_precondition with the reason", end.err)
			}
			_, err := c.client(ticketAlice).SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: "g1", Seq: 1, Payload: []byte{1}}))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), reason) {
				t.Fatalf("SendInput to the failed game: %v; want failed_precondition with the reason", err)
			}
		})
	}
}

// A game that fails on the node serving the stream (its module trapped): the
// node's "failed" status reaches the client, then the stream ends with
// FailedPrecondition and the reason, not as if the game had simply ended.
func TestFakeStreamEndsWhenGameFailsOnItsNode(t *testing.T) {
	t.Parallel()
	for _, k := range streamKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeCluster(t, Limits{})
			a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
			c.addGame(tenantT1, "g1", "node-a")
			c.waitOwner(tenantT1, "g1", "node-a")
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			msgs := k.open(t, ctx, c, "g1")
			waitStatus(t, msgs, "node-a")
			a.endStreams(endFailed)
			end, last := streamEnd(t, msgs, clusterstate.StateFailed)
			if last == nil || last.State != clusterstate.StateFailed || last.Message != failReason {
				t.Fatalf("the last status: %+v; want node-a's failed status", last)
			}
			if connect.CodeOf(end.err) != connect.CodeFailedPrecondition || !strings.Contains(end.err.Error(), failReason) {
				t.Fatalf("the stream ended with %v; want failed_precondition with the reason", end.err)
			}
			if l := leaksAddress(end.err.Error(), a); l != "" {
				t.Fatalf("%v leaks %q", end.err, l)
			}
		})
	}
}

// A game no node takes over: the stream says "migrating", waits the whole
// re-attach budget (30 s, on the gateway's fake clock) and ends with
// Unavailable saying the game is not running anywhere — not a "migrating"
// that never ends.
func TestFakeStreamMigratingIsBounded(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	c := newFakeClusterClock(t, Limits{}, clk)
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	msgs := streamKinds[0].open(t, ctx, c, "g1")
	waitStatus(t, msgs, "node-a")

	// node-a loses the game (its lease expired) and no node claims it.
	a.disown(tenantT1, "g1")
	c.del(clusterstate.OwnerKey(tenantT1, "g1"))
	a.endStreams(endError)
	for {
		m := next(t, msgs, 5*time.Second)
		if m.end {
			t.Fatalf("the stream ended at once: %v", m.err)
		}
		if m.status != nil && m.status.State == "migrating" {
			break
		}
	}
	start := clk.Now()
	var end streamMsg
	clk.Drive(t, 50*time.Millisecond, "the stream ends", func() bool {
		select {
		case m := <-msgs:
			if !m.end {
				t.Fatalf("while no node runs the game: %+v (status %+v)", m, m.status)
			}
			end = m
			return true
		default:
			return false
		}
	})
	within(t, "giving up on a game no node runs", clk.Now().Sub(start), reattachTimeout, reattachTimeout+2*time.Second)
	if connect.CodeOf(end.err) != connect.CodeUnavailable || !strings.Contains(end.err.Error(), "not running anywhere right now") {
		t.Fatalf("the stream ended with %v; want unavailable: … not running anywhere right now …", end.err)
	}
}
