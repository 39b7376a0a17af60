package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/gateway/framecodec"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// streamMsg is one message a client stream received, or its end (end set,
// err nil for a clean end).
type streamMsg struct {
	frame  *ludusv1.Frame
	status *ludusv1.Status
	ack    *ludusv1.InputAck
	end    bool
	err    error
	at     time.Time
}

// pumpFrames reads a StreamFrames stream into a channel until it ends.
func pumpFrames(s *connect.ServerStreamForClient[ludusv1.StreamFramesResponse]) <-chan streamMsg {
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

// pumpPlay reads a Play stream into a channel until it ends.
func pumpPlay(s *connect.BidiStreamForClient[ludusv1.PlayRequest, ludusv1.PlayResponse]) <-chan streamMsg {
	ch := make(chan streamMsg, 4096)
	go func() {
		defer close(ch)
		for {
			m, err := s.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				ch <- streamMsg{end: true, err: err, at: time.Now()}
				return
			}
			ch <- streamMsg{frame: m.GetFrame(), status: m.GetStatus(), ack: m.GetAck(), at: time.Now()}
		}
	}()
	return ch
}

// next returns the stream's next message, failing the test after d.
func next(t *testing.T, ch <-chan streamMsg, d time.Duration) streamMsg {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("read past the end of the stream")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no message from the stream within %v", d)
	}
	panic("unreachable")
}

// frameReader decodes a client stream's frames as the client would.
type frameReader struct {
	t        *testing.T
	dec      framecodec.Decoder
	lastTick int64
}

// read decodes f (checking its tick against the view and that ticks
// increase, a re-attach's keyframe aside) and returns the node that rendered it.
func (r *frameReader) read(f *ludusv1.Frame) string {
	r.t.Helper()
	view := f.View
	if f.Encoding != ludusv1.FrameEncoding_FRAME_ENCODING_RAW && f.Encoding != ludusv1.FrameEncoding_FRAME_ENCODING_UNSPECIFIED {
		v, err := r.dec.Decode(f.View)
		if err != nil {
			r.t.Fatalf("frame of tick %d (keyframe %v, base %d) does not decode: %v", f.Tick, f.Keyframe, f.BaseTick, err)
		}
		view = v
	}
	if len(view) != 256 {
		r.t.Fatalf("frame of tick %d: %d bytes", f.Tick, len(view))
	}
	if got := int64(binary.LittleEndian.Uint64(view[32:])); got != f.Tick {
		r.t.Fatalf("frame says tick %d, its view tick %d", f.Tick, got)
	}
	// Ticks never go back; the one tick that may repeat is the keyframe a
	// new owner starts with, when it resumes within the tick the old owner
	// last drew (both fake nodes tick on one clock).
	if f.Tick < r.lastTick || (f.Tick == r.lastTick && !f.Keyframe) {
		r.t.Fatalf("tick %d (keyframe %v) after %d", f.Tick, f.Keyframe, r.lastTick)
	}
	r.lastTick = f.Tick
	return viewNode(view)
}

// A node hands the game off: its stream ends with status "moved" while the
// owner key moves. The client's stream stays open and sees "migrating", a
// status naming the previous node with the migration's duration, then a
// keyframe from the new owner and deltas after it — and never a frame of the
// old node after "migrating". The gateway's clock is a fake one: migration_ms
// is exactly the time the test lets pass before the new owner claims.
func TestFakeStreamReattachesOnMove(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	c := newFakeClusterClock(t, Limits{}, clk)
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	c.waitNodes(2)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{
		GameId: "g1", AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	msgs := pumpFrames(stream)
	fr := &frameReader{t: t}

	m := next(t, msgs, 5*time.Second)
	if m.status == nil || m.status.NodeId != "node-a" || m.status.State != clusterstate.StateRunning {
		t.Fatalf("first message: %+v", m)
	}
	deltas := 0
	for i := 0; i < 8; i++ {
		m = next(t, msgs, 5*time.Second)
		if m.frame == nil {
			t.Fatalf("message %d from node-a: %+v", i, m)
		}
		if i == 0 && !m.frame.Keyframe {
			t.Fatal("the stream's first frame is not a keyframe")
		}
		if !m.frame.Keyframe {
			deltas++
		}
		if n := fr.read(m.frame); n != "node-a" {
			t.Fatalf("frame from %q before the move", n)
		}
	}
	if deltas == 0 {
		t.Fatal("no delta frames from node-a: the keyframe check after the move would prove nothing")
	}

	// The handoff: node-a stops running the game and its stream says "moved".
	a.disown(tenantT1, "g1")
	a.endStreams(endMoved)
	var migrating streamMsg
	for migrating.status == nil {
		m = next(t, msgs, 5*time.Second)
		switch {
		case m.end:
			t.Fatalf("the stream ended at the move: %v", m.err)
		case m.frame != nil:
			if n := fr.read(m.frame); n != "node-a" {
				t.Fatalf("frame from %q before the migrating status", n)
			}
		case m.status != nil:
			if m.status.State != "migrating" {
				t.Fatalf("status before migrating: %+v", m.status)
			}
			migrating = m
		}
	}
	// The new owner claims the game 100 ms later.
	clk.Advance(100 * time.Millisecond)
	c.setOwner(tenantT1, "g1", "node-b")

	m = next(t, msgs, 5*time.Second)
	if m.status == nil || m.status.PreviousNodeId != "node-a" || m.status.NodeId != "node-b" || m.status.State != clusterstate.StateRunning {
		t.Fatalf("after migrating: %+v (status %+v); want a status with previous_node_id node-a", m, m.status)
	}
	if ms := m.status.MigrationMs; ms != 100 {
		t.Fatalf("migration_ms %d; the new owner claimed 100 ms after the migrating status", ms)
	}
	sawKey := false
	for frames := 0; frames < 8; {
		m = next(t, msgs, 5*time.Second)
		if m.end {
			t.Fatalf("the stream ended after the re-attach: %v", m.err)
		}
		if m.status != nil {
			if frames > 0 || m.status.NodeId != "node-b" || m.status.State != clusterstate.StateRunning {
				t.Fatalf("status after the re-attach: %+v", m.status)
			}
			continue
		}
		if frames == 0 {
			if !m.frame.Keyframe {
				t.Fatalf("the first frame after the re-attach (tick %d) is a delta on tick %d, not a keyframe", m.frame.Tick, m.frame.BaseTick)
			}
			sawKey = true
		}
		if n := fr.read(m.frame); n != "node-b" {
			t.Fatalf("frame %d after the re-attach from %q", frames, n)
		}
		frames++
	}
	if !sawKey {
		t.Fatal("no keyframe after the re-attach")
	}
	if got := c.metricWith("ludus_gateway_reattaches_total", map[string]string{"tenant": tenantT1}); got != 1 {
		t.Fatalf("ludus_gateway_reattaches_total = %v; want 1", got)
	}
}

// The owner fails its stream with an error (with its address in the message)
// as the game moves: the client's stream re-attaches and the node's error
// never reaches it.
func TestFakeStreamReattachesAfterUpstreamError(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	b := c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: "g1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	msgs := pumpFrames(stream)
	fr := &frameReader{t: t}
	for i := 0; i < 4; i++ {
		if m := next(t, msgs, 5*time.Second); m.frame != nil {
			if n := fr.read(m.frame); n != "node-a" {
				t.Fatalf("frame from %q", n)
			}
		} else if m.end {
			t.Fatalf("stream ended: %v", m.err)
		}
	}
	c.moveOwner(tenantT1, "g1", "node-a", "node-b")
	a.endStreams(endError)
	phase := 0 // 0: before migrating, 1: migrating seen, 2: re-attach status seen
	for frames := 0; frames < 5; {
		m := next(t, msgs, 5*time.Second)
		switch {
		case m.end:
			t.Fatalf("the stream ended: %v", m.err)
		case m.status != nil:
			if l := leaksAddress(m.status.Message, a, b); l != "" {
				t.Fatalf("status %+v leaks %q", m.status, l)
			}
			switch {
			case m.status.State == "migrating" && phase == 0:
				phase = 1
			case m.status.PreviousNodeId == "node-a" && phase == 1:
				phase = 2
			case m.status.NodeId == "node-b" && phase == 2:
			default:
				t.Fatalf("status %+v in phase %d", m.status, phase)
			}
		case m.frame != nil:
			n := fr.read(m.frame)
			if phase == 0 && n == "node-a" {
				continue
			}
			if phase != 2 || n != "node-b" {
				t.Fatalf("frame from %q in phase %d", n, phase)
			}
			frames++
		}
	}
}

// A frozen owner (SIGSTOP, a partition) keeps its stream open and sends
// nothing. After 3 s of silence (upstreamSilence) the gateway gives up on it and
// re-attaches the client's stream to the node that took the game over. The
// 3 s pass on the gateway's fake clock.
func TestFakeStreamReattachesFromFrozenNode(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	c := newFakeClusterClock(t, Limits{}, clk)
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addNode(clusterstate.NodeInfo{ID: "node-b"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stream, err := c.client(ticketAlice).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{
		GameId: "g1", AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	msgs := pumpFrames(stream)
	fr := &frameReader{t: t}
	for frames := 0; frames < 4; {
		m := next(t, msgs, 5*time.Second)
		if m.end {
			t.Fatalf("stream ended: %v", m.err)
		}
		if m.frame != nil {
			if n := fr.read(m.frame); n != "node-a" {
				t.Fatalf("frame from %q", n)
			}
			frames++
		}
	}
	a.freeze()
	// Its lease expires (the owner key goes), then node-b claims the game.
	c.del(clusterstate.OwnerKey(tenantT1, "g1"))
	c.setOwner(tenantT1, "g1", "node-b")
	c.waitOwner(tenantT1, "g1", "node-b")
	// What node-a sent before it froze is relayed; then the stream is silent.
	for quiet := false; !quiet; {
		select {
		case m := <-msgs:
			if m.frame == nil {
				t.Fatalf("before the silence timeout: %+v (status %+v)", m, m.status)
			}
			if n := fr.read(m.frame); n != "node-a" {
				t.Fatalf("frame from %q before the re-attach", n)
			}
		case <-time.After(100 * time.Millisecond):
			quiet = true
		}
	}
	// Silent for just under the documented timeout: the gateway still waits
	// on node-a (the stream of a node that is only slow must not move).
	clk.Advance(documentedSilence - time.Millisecond)
	select {
	case m := <-msgs:
		t.Fatalf("after %v of silence: %+v (status %+v)", documentedSilence-time.Millisecond, m, m.status)
	case <-time.After(200 * time.Millisecond):
	}
	clk.Advance(time.Millisecond)
	if m := next(t, msgs, 2*time.Second); m.status == nil || m.status.State != "migrating" || m.status.NodeId != "node-a" {
		t.Fatalf("after %v of silence: %+v (status %+v); want migrating from node-a", documentedSilence, m, m.status)
	}
	m := next(t, msgs, 2*time.Second)
	if m.status == nil || m.status.PreviousNodeId != "node-a" || m.status.NodeId != "node-b" {
		t.Fatalf("after migrating: %+v (status %+v); want the re-attach to node-b", m, m.status)
	}
	// migration_ms counts from when the gateway gave up on node-a; node-b had
	// claimed the game before, and the clock has not moved since.
	if m.status.MigrationMs != 0 {
		t.Fatalf("migration_ms %d; want 0", m.status.MigrationMs)
	}
	for frames := 0; frames < 4; {
		m := next(t, msgs, 5*time.Second)
		if m.end {
			t.Fatalf("stream ended: %v", m.err)
		}
		if m.frame == nil {
			continue
		}
		if frames == 0 && !m.frame.Keyframe {
			t.Fatal("the first frame from node-b is not a keyframe")
		}
		if n := fr.read(m.frame); n != "node-b" {
			t.Fatalf("frame from %q after the re-attach", n)
		}
		frames++
	}
}
