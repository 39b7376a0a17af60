package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// openFrames opens a StreamFrames stream and returns it with its messages
// once the first one arrived (the stream holds its slot), or the error it
// ended with.
func openFrames(t *testing.T, ctx context.Context, c *fakeCluster, ticket, game string) (<-chan streamMsg, context.CancelFunc, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.client(ticket).StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: game}))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	msgs := pumpFrames(stream)
	m := next(t, msgs, 5*time.Second)
	if m.end {
		cancel()
		return nil, nil, m.err
	}
	return msgs, cancel, nil
}

// MaxStreamsPerAccount bounds the frame streams (StreamFrames and Play
// together) one account holds open; another account is not affected, and a
// closed stream frees its slot.
func TestFakeStreamsPerAccount(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{MaxStreamsPerAccount: 2})
	c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	_, close1, err := openFrames(t, ctx, c, ticketAlice, "g1")
	if err != nil {
		t.Fatal(err)
	}
	defer close1()
	play, msgs := openPlay(t, ctx, c, ticketAlice, "g1")
	waitStatus(t, msgs, "node-a")
	_, _, err = openFrames(t, ctx, c, ticketAlice, "g1")
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "limit is 2") {
		t.Fatalf("a third stream (StreamFrames): %v; want resource_exhausted naming the limit", err)
	}
	play2, msgs2 := openPlay(t, ctx, c, ticketAlice, "g1")
	defer play2.CloseResponse()
	if m := next(t, msgs2, 5*time.Second); !m.end || connect.CodeOf(m.err) != connect.CodeResourceExhausted {
		t.Fatalf("a third stream (Play): %+v; want resource_exhausted", m)
	}
	_, closeBob, err := openFrames(t, ctx, c, ticketBob, "g1")
	if err != nil {
		t.Fatalf("another account's stream: %v", err)
	}
	defer closeBob()
	if got := c.metricWith("ludus_gateway_limit_rejections_total", map[string]string{"limit": "streams"}); got != 2 {
		t.Fatalf("limit rejections (streams) = %v; want 2", got)
	}
	if got := c.metricWith("ludus_gateway_active_streams", map[string]string{"tenant": tenantT1}); got != 3 {
		t.Fatalf("active streams = %v; want 3", got)
	}

	// Alice closes her Play stream: its slot is free again.
	if err := play.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if err := play.CloseResponse(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a freed stream slot", func() bool {
		_, closeN, err := openFrames(t, ctx, c, ticketAlice, "g1")
		if err != nil {
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("stream after closing one: %v", err)
			}
			return false
		}
		t.Cleanup(closeN)
		return true
	})
}

// The input rate is a token bucket per account shared by SendInput and Play:
// over the burst SendInput is refused with ResourceExhausted (and the input
// never reaches the node), and a Play stream ends with it.
func TestFakeInputRate(t *testing.T) {
	t.Parallel()
	// A rate so slow that no token comes back during the test.
	c := newFakeCluster(t, Limits{InputsPerSecond: 0.001, InputBurst: 5})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	for seq := uint64(1); seq <= 5; seq++ {
		if _, err := sendInput(ctx, c, ticketAlice, "g1", seq); err != nil {
			t.Fatalf("input %d of the burst: %v", seq, err)
		}
	}
	_, err := sendInput(ctx, c, ticketAlice, "g1", 6)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "input rate limit") {
		t.Fatalf("input over the burst: %v; want resource_exhausted: input rate limit…", err)
	}
	if _, err := sendInput(ctx, c, ticketBob, "g1", 1); err != nil {
		t.Fatalf("another account's input: %v", err)
	}
	if got := a.gotSendInputs(); len(got) != 6 {
		t.Fatalf("node-a got %v; want alice's 5 and bob's 1", got)
	}

	// Play shares the bucket: alice has none left, carol has 5.
	for _, tc := range []struct {
		ticket string
		ok     uint64 // inputs within the bucket
	}{{ticketAlice, 0}, {ticketCarol, 5}} {
		play, msgs := openPlay(t, ctx, c, tc.ticket, "g1")
		waitStatus(t, msgs, "node-a")
		for seq := uint64(1); seq <= tc.ok+1; seq++ {
			if err := sendPlayInput(t, play, seq); err != nil {
				break // the stream ended
			}
		}
		var acks int
		for {
			m := next(t, msgs, 5*time.Second)
			if m.ack != nil {
				acks++
			}
			if m.end {
				if connect.CodeOf(m.err) != connect.CodeResourceExhausted || !strings.Contains(m.err.Error(), "input rate limit") {
					t.Fatalf("%s: Play over the input rate ended with %v", tc.ticket, m.err)
				}
				break
			}
		}
		if uint64(acks) > tc.ok {
			t.Fatalf("%s: %d inputs acknowledged; the bucket held %d", tc.ticket, acks, tc.ok)
		}
		play.CloseResponse()
	}
	if got := c.metricWith("ludus_gateway_limit_rejections_total", map[string]string{"limit": "input_rate"}); got != 3 {
		t.Fatalf("limit rejections (input_rate) = %v; want 3", got)
	}
}

// A Play stream may have MaxPendingInputs inputs waiting for their acks; one
// more, while the node acknowledges nothing, ends the stream with
// ResourceExhausted.
func TestFakePendingInputs(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{MaxPendingInputs: 4})
	a := c.addNode(clusterstate.NodeInfo{ID: "node-a"})
	c.addGame(tenantT1, "g1", "node-a")
	c.waitOwner(tenantT1, "g1", "node-a")
	a.set(func(n *fakeNode) { n.inputsNoAck = true })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	play, msgs := openPlay(t, ctx, c, ticketAlice, "g1")
	defer play.CloseResponse()
	waitStatus(t, msgs, "node-a")
	for seq := uint64(1); seq <= 4; seq++ {
		if err := sendPlayInput(t, play, seq); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "node-a to receive inputs 1..4", func() bool { return len(a.gotInputs()) == 4 })
	// The stream is still open with 4 inputs pending.
	select {
	case m := <-msgs:
		if m.end || m.ack != nil {
			t.Fatalf("with 4 inputs pending: %+v", m)
		}
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	if err := sendPlayInput(t, play, 5); err != nil {
		t.Fatal(err)
	}
	for {
		m := next(t, msgs, 5*time.Second)
		if m.ack != nil {
			t.Fatalf("the node acknowledged nothing, the client got %+v", m.ack)
		}
		if !m.end {
			continue
		}
		if connect.CodeOf(m.err) != connect.CodeResourceExhausted || !strings.Contains(m.err.Error(), "limit is 4") {
			t.Fatalf("a fifth pending input ended the stream with %v; want resource_exhausted naming the limit", m.err)
		}
		within(t, "refusing the fifth pending input", time.Since(start), 0, 2*time.Second)
		break
	}
	if got := a.gotInputs(); len(got) != 4 {
		t.Fatalf("node-a received %v; the fifth input must not be sent", got)
	}
	if got := c.metricWith("ludus_gateway_limit_rejections_total", map[string]string{"limit": "pending_inputs"}); got != 1 {
		t.Fatalf("limit rejections (pending_inputs) = %v; want 1", got)
	}
}

// TestFakeCreateGameRate: each account's CreateGame calls share a token
// bucket: over the burst a call is refused with the wait (message and
// Retry-After) before any node is asked, another account is not held up,
// and the bucket refills with time.
func TestFakeCreateGameRate(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{GamesPerMinute: 2, GamesBurst: 2})
	c.addNode(clusterstate.NodeInfo{ID: "node-a", Capacity: 100})
	c.waitNodes(1)
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c.gw.creations.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	create := func(ticket string) error {
		_, err := c.client(ticket).CreateGame(context.Background(), connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena"}))
		return err
	}
	for i := range 2 {
		if err := create(ticketAlice); err != nil {
			t.Fatalf("create %d of the burst: %v", i, err)
		}
	}
	err := create(ticketAlice)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted ||
		!strings.Contains(ce.Message(), "at most 2 games a minute per account (bursts of 2); slow down: retry in 30 s") {
		t.Fatalf("create over the burst: %v, want ResourceExhausted naming the limit and the wait", err)
	}
	if ce.Meta().Get("Retry-After") != "30" {
		t.Errorf("Retry-After = %q, want 30", ce.Meta().Get("Retry-After"))
	}
	if got := testutil.ToFloat64(c.gw.metrics.limitRejected.WithLabelValues(tenantT1, "game_rate")); got != 1 {
		t.Errorf("limit_rejections_total{limit=game_rate} = %v, want 1", got)
	}
	if err := create(ticketBob); err != nil {
		t.Fatalf("another account: %v", err)
	}
	mu.Lock()
	now = now.Add(30 * time.Second)
	mu.Unlock()
	if err := create(ticketAlice); err != nil {
		t.Fatalf("30 s later: %v", err)
	}
}

// TestFakeJoinGameRate: each account's JoinGame calls share a token bucket:
// over the burst a call is refused with the wait, before the backend or the
// node is asked; joins answered Unavailable (a game moving) are not
// counted; another account joins.
func TestFakeJoinGameRate(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, Limits{JoinsPerMinute: 2, JoinsBurst: 2})
	c.addNode(clusterstate.NodeInfo{ID: "node-a", Capacity: 100})
	c.waitNodes(1)
	c.put(clusterstate.GameKey(tenantT1, "jg"), clusterstate.GameSpec{TenantID: tenantT1, GameID: "jg", ModuleName: "arena", BuildID: fakeBuildID,
		TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "fake"})
	c.put(clusterstate.StatusKey(tenantT1, "jg"), clusterstate.GameStatus{State: clusterstate.StateRunning, NodeID: "node-a"})
	c.setOwner(tenantT1, "jg", "node-a")
	join := func(ticket string) error {
		_, err := c.client(ticket).JoinGame(context.Background(), connect.NewRequest(&ludusv1.JoinGameRequest{GameId: "jg"}))
		return err
	}
	// Joins of a game that has no node right now (moving) are retries: they
	// cost no token.
	c.put(clusterstate.GameKey(tenantT1, "moving"), clusterstate.GameSpec{TenantID: tenantT1, GameID: "moving", ModuleName: "arena", BuildID: fakeBuildID,
		TickRate: 35, MaxPlayers: 8, FrameDivisor: 2, ViewFormat: "fake"})
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.client(ticketAlice).JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: "moving"}))
		cancel()
		if code := connect.CodeOf(err); code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded && code != connect.CodeCanceled {
			t.Fatalf("a join of a game without a node: %v, want Unavailable or the deadline", err)
		}
	}
	var err error
	for i := range 2 {
		if err := join(ticketAlice); err != nil {
			t.Fatalf("join %d of the burst: %v", i, err)
		}
	}
	err = join(ticketAlice)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "join rate limit: at most 2 joins a minute per account (bursts of 2); slow down: retry in 30 s") {
		t.Fatalf("a join over the burst: %v, want ResourceExhausted naming the limit and the wait", err)
	}
	if got := testutil.ToFloat64(c.gw.metrics.limitRejected.WithLabelValues(tenantT1, "join_rate")); got != 1 {
		t.Errorf("limit_rejections_total{limit=join_rate} = %v, want 1", got)
	}
	if err := join(ticketBob); err != nil {
		t.Fatalf("another account: %v", err)
	}
}
