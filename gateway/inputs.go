package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// inputRetryBudget is how long the gateway keeps re-sending one unary input
// to a moving game before it answers Unavailable: long enough to cover a
// takeover after a node dies (lease TTL plus the claim).
const inputRetryBudget = 4 * time.Second

// retryable reports whether a node call failed because the game is moving or
// its node cannot be reached (try the game's owner again), rather than because
// of the input itself.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeNotFound, connect.CodeDeadlineExceeded, connect.CodeCanceled,
		connect.CodeUnknown, connect.CodeInternal:
		return true
	}
	return false
}

// playerError is what a player sees of a node's refusal: the node's own
// message for refusals about the request (they say what to do), and never a
// node address or transport error — those become a plain Unavailable.
func playerError(gameID string, err error) error {
	if err == nil {
		return nil
	}
	if retryable(err) {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s is moving to another node or its node cannot be reached; retry in a moment", gameID))
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		out := connect.NewError(ce.Code(), errors.New(ce.Message()))
		for _, d := range ce.Details() {
			out.AddDetail(d)
		}
		return out
	}
	return connect.NewError(connect.CodeUnknown, errors.New("the input could not be delivered"))
}

// sendInput delivers one unary input to the game's owner, following the game
// when it moves (callOwner). The node applies a re-sent seq at most once.
func (s *gameService) sendInput(ctx context.Context, c *auth.Claims, req *clusterv1.SendInputRequest) (*clusterv1.SendInputResponse, error) {
	var out *clusterv1.SendInputResponse
	err := s.callOwner(ctx, c, req.GameId, func(ctx context.Context, n clusterstate.NodeInfo) error {
		resp, err := s.g.node(n).SendInput(ctx, connect.NewRequest(req))
		if err == nil {
			out = resp.Msg
		}
		return err
	})
	return out, err
}

// callOwner makes one call to the game's owner, following the game when it
// moves: a call to a node that stops owning the game is abandoned at once
// (ownerWatch) and made again to the new owner, for up to inputRetryBudget.
// call must be safe to repeat (inputs carry their seq; a join is idempotent).
func (s *gameService) callOwner(ctx context.Context, c *auth.Claims, gameID string, call func(context.Context, clusterstate.NodeInfo) error) error {
	clk := s.g.clock
	deadline := clk.Now().Add(inputRetryBudget)
	backoff := 20 * time.Millisecond
	for {
		n, err := s.owner(ctx, c, gameID)
		if err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			return err // no such game, or it is over: the owner lookup says so
		}
		if err == nil {
			cctx, done := s.g.dir.track(ctx, c.TenantID, gameID, n.ID)
			cctx, cancel := context.WithTimeout(cctx, nodeCallTimeout)
			err = call(cctx, n)
			cancel()
			done()
			if err == nil {
				return nil
			}
			if !retryable(err) {
				return playerError(gameID, err)
			}
		}
		if ctx.Err() != nil {
			return connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
		}
		if clk.Now().After(deadline) {
			return playerError(gameID, err)
		}
		if !sleep(clk, backoff, ctx.Done()) {
			return connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// pendingInput is an input of a Play stream not yet acknowledged.
type pendingInput struct {
	seq     uint64
	payload []byte
}

// playInputs is the input half of a Play stream: inputs go to the game's
// owner as they arrive, over one ordered Inputs stream (the node applies each
// at the next tick), and acks come back asynchronously, one per input in seq
// order. When the game moves the upstream is dropped at once and everything
// unacknowledged is re-sent, in order, to the new owner.
type playInputs struct {
	s      *gameService
	c      *auth.Claims
	gameID string
	// controller is the Play stream's controller id (controllerHeader).
	controller string
	send       func(*ludusv1.PlayResponse) error

	mu      sync.Mutex
	pending []pendingInput // in seq order; the first is the next to be acked
	wake    chan struct{}  // an input was added
}

// add queues an input; false when too many wait for their acks.
func (p *playInputs) add(in pendingInput) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) >= p.s.g.limits.MaxPendingInputs {
		return false
	}
	p.pending = append(p.pending, in)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return true
}

// run delivers until ctx ends or an input is refused for a reason the client
// must hear. owner is the node the stream's frames come from, if known.
func (p *playInputs) run(ctx context.Context, owner func() *clusterstate.NodeInfo) error {
	clk := p.s.g.clock
	var stalledSince time.Time
	backoff := 20 * time.Millisecond
	for ctx.Err() == nil {
		var n clusterstate.NodeInfo
		var err error
		// The directory is the freshest word on the owner; the frame stream's
		// node is a fallback (it lags a frozen owner by its silence timeout).
		if d, ok := p.s.g.dir.owner(p.c.TenantID, p.gameID); ok {
			n = d
		} else if o := owner(); o != nil {
			n = *o
		} else if n, err = p.s.owner(ctx, p.c, p.gameID); err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			return err // no such game, or it is over
		}
		if err == nil {
			var progressed bool
			progressed, err = p.upstream(ctx, n)
			if progressed {
				stalledSince, backoff = time.Time{}, 20*time.Millisecond
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !retryable(err) && !errors.Is(err, errOwnerChanged) {
			return playerError(p.gameID, err)
		}
		if stalledSince.IsZero() {
			stalledSince = clk.Now()
		}
		if clk.Now().Sub(stalledSince) > reattachTimeout {
			return playerError(p.gameID, connect.NewError(connect.CodeUnavailable, err))
		}
		if !sleep(clk, backoff, ctx.Done()) {
			return nil
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
	return nil
}

// upstream runs one Inputs stream to node n: it re-sends what is pending,
// then sends new inputs as they come, and forwards acks. It returns when the
// stream fails, or the game's owner changes (errOwnerChanged).
func (p *playInputs) upstream(ctx context.Context, n clusterstate.NodeInfo) (progressed bool, err error) {
	tracked, done := p.s.g.dir.track(ctx, p.c.TenantID, p.gameID, n.ID)
	defer done()
	ctx, cancel := context.WithCancel(tracked)
	defer cancel()
	up := p.s.g.node(n).Inputs(ctx)
	up.RequestHeader().Set(controllerHeader, p.controller)
	defer up.CloseResponse()
	header := &clusterv1.InputsRequest{TenantId: p.c.TenantID, GameId: p.gameID, AccountId: p.c.AccountID}
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		_ = p.feed(ctx, up, header) // a failed send shows as a failed receive
		_ = up.CloseRequest()
	}()
	defer func() { cancel(); <-fed }() // no Send after upstream returns
	for {
		resp, rerr := up.Receive()
		if rerr != nil {
			if errors.Is(context.Cause(tracked), errOwnerChanged) {
				return progressed, errOwnerChanged
			}
			return progressed, rerr
		}
		progressed = true
		p.mu.Lock()
		// Acks come in the order the inputs were sent, one per input.
		for len(p.pending) > 0 && p.pending[0].seq <= resp.AckedSeq {
			p.pending = p.pending[1:]
		}
		p.mu.Unlock()
		p.s.g.metrics.inputAccepted(p.c.TenantID)
		if err := p.send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Ack{Ack: &ludusv1.InputAck{
			AckedSeq: resp.AckedSeq, Tick: resp.Tick, SupersededBySeq: resp.SupersededBySeq}}}); err != nil {
			return progressed, err
		}
	}
}

// feed sends the header, every pending input, then each new one.
func (p *playInputs) feed(ctx context.Context, up *connect.BidiStreamForClient[clusterv1.InputsRequest, clusterv1.InputsResponse], header *clusterv1.InputsRequest) error {
	if err := up.Send(header); err != nil {
		return err
	}
	var sent uint64 // highest seq sent on this upstream
	for {
		p.mu.Lock()
		var batch []pendingInput
		for _, in := range p.pending {
			if in.seq > sent {
				batch = append(batch, in)
			}
		}
		p.mu.Unlock()
		for _, in := range batch {
			if err := up.Send(&clusterv1.InputsRequest{Seq: in.seq, Payload: in.payload}); err != nil {
				return err
			}
			sent = in.seq
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.wake:
		}
	}
}
