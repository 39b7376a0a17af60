package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/fleet"
)

// Ping answers at once with the gateway's clock.
func (s *gameService) Ping(ctx context.Context, req *connect.Request[ludusv1.PingRequest]) (*connect.Response[ludusv1.PingResponse], error) {
	return connect.NewResponse(&ludusv1.PingResponse{
		ClientUnixNanos: req.Msg.ClientUnixNanos, ServerUnixNanos: time.Now().UnixNano()}), nil
}

// playInput is an input of a Play stream waiting for its acknowledgement.
type playInput struct {
	seq     uint64
	payload []byte
}

// Play multiplexes one bidirectional client stream onto the node's calls: a
// receive loop checks the client's inputs and queues them, a delivery loop
// sends them in order to the game's owner (SendInput) and acknowledges them on
// the stream, and the stream's frames come from the game's owner as for
// StreamFrames, re-attaching when the game moves. An input the owner could not
// take because the game was moving is re-sent to the new owner (the node
// acknowledges a re-sent sequence number without applying it twice).
func (s *gameService) Play(ctx context.Context, stream *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	c := claimsFrom(ctx)
	first, err := stream.Receive()
	if errors.Is(err, io.EOF) {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the Play stream ended before its PlayStart"))
	}
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of a Play stream must be a PlayStart naming the game"))
	}
	done, err := s.openStream(c, kindPlay, start.GameId)
	if err != nil {
		return err
	}
	defer done()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sendMu sync.Mutex // frames and acks are sent from two goroutines
	send := func(m *ludusv1.PlayResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	var owner atomic.Pointer[fleet.NodeInfo]
	queue := make(chan playInput, s.g.limits.MaxPendingInputs)
	go func() {
		if err := s.receiveInputs(c, stream, queue); err != nil {
			cancel(err)
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.deliverInputs(ctx, c, start.GameId, queue, &owner, send); err != nil {
			cancel(err)
		}
	}()
	err = s.streamGame(ctx, c, kindPlay, start.GameId, start.AcceptEncodings, frameSink{
		frame: func(f *ludusv1.Frame) error {
			return send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: f}})
		},
		status: func(st *ludusv1.Status) error {
			return send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: st}})
		},
		attached: func(n fleet.NodeInfo) { owner.Store(&n) },
	})
	cause := context.Cause(ctx)
	cancel(nil)
	wg.Wait() // no Send after the handler returns
	if cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // an input was refused: the stream ends with its error
	}
	return err
}

// receiveInputs reads the client's inputs until it closes its side. An error
// ends the stream: a malformed message, an input over a limit.
func (s *gameService) receiveInputs(c *auth.Claims, stream *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse], queue chan<- playInput) error {
	for {
		m, err := stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the client sends no more inputs; frames go on
			}
			return err
		}
		in := m.GetInput()
		if in == nil {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("after its PlayStart, every message of a Play stream must be a PlayInput"))
		}
		if err := s.checkInput(c, in.Seq, in.Payload); err != nil {
			return err
		}
		select {
		case queue <- playInput{seq: in.Seq, payload: in.Payload}:
		default:
			s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "pending_inputs").Inc()
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"%d inputs are waiting for their acknowledgement (the limit is %d); wait for acks before sending more", cap(queue), cap(queue)))
		}
	}
}

// deliverInputs sends queued inputs, in order, to the game's owner and
// acknowledges each on the stream.
func (s *gameService) deliverInputs(ctx context.Context, c *auth.Claims, gameID string, queue <-chan playInput, owner *atomic.Pointer[fleet.NodeInfo], send func(*ludusv1.PlayResponse) error) error {
	for {
		var in playInput
		select {
		case <-ctx.Done():
			return nil
		case in = <-queue:
		}
		ack, err := s.deliver(ctx, c, gameID, in, owner)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.g.metrics.inputsAccepted.WithLabelValues(c.TenantID).Inc()
		if err := send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Ack{Ack: &ludusv1.InputAck{AckedSeq: ack.AckedSeq, Tick: ack.Tick}}}); err != nil {
			return err
		}
	}
}

// deliver sends one input to the game's owner, waiting for a moving game's new
// owner (up to the re-attach timeout) and re-sending the input there.
func (s *gameService) deliver(ctx context.Context, c *auth.Claims, gameID string, in playInput, owner *atomic.Pointer[fleet.NodeInfo]) (*clusterv1.SendInputResponse, error) {
	deadline := time.Now().Add(reattachTimeout)
	backoff := 20 * time.Millisecond
	req := &clusterv1.SendInputRequest{TenantId: c.TenantID, GameId: gameID, AccountId: c.AccountID, Seq: in.seq, Payload: in.payload}
	for {
		n := owner.Load()
		var err error
		if n == nil {
			var found fleet.NodeInfo
			if found, err = s.owner(ctx, c, gameID); err == nil {
				n = &found
			}
		}
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
			var resp *connect.Response[clusterv1.SendInputResponse]
			resp, err = s.g.node(n.Addr).SendInput(cctx, connect.NewRequest(req))
			cancel()
			if err == nil {
				return resp.Msg, nil
			}
			owner.CompareAndSwap(n, nil) // look the owner up again
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeNotFound, connect.CodeDeadlineExceeded, connect.CodeCanceled,
			connect.CodeUnknown, connect.CodeInternal:
		default:
			return nil, err // not joined, game over, invalid input: the client must know
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("input %d not delivered within %v: %w", in.seq, reattachTimeout, err))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}
