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
	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Ping answers at once with the gateway's clock.
func (s *gameService) Ping(ctx context.Context, req *connect.Request[ludusv1.PingRequest]) (*connect.Response[ludusv1.PingResponse], error) {
	return connect.NewResponse(&ludusv1.PingResponse{
		ClientUnixNanos: req.Msg.ClientUnixNanos, ServerUnixNanos: time.Now().UnixNano(), Region: s.g.cfg.Region}), nil
}

// Play multiplexes one bidirectional client stream onto the node's calls: a
// receive loop checks the client's inputs and queues them, playInputs
// pipelines them in order to the game's owner over one Inputs stream and
// relays the acks as they become durable, and the stream's frames come from
// the game's owner as for StreamFrames, re-attaching when the game moves.
// Inputs not yet acknowledged when the game moves are re-sent to the new
// owner (the node acknowledges a re-sent sequence number without applying it
// twice).
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
	var owner atomic.Pointer[clusterstate.NodeInfo]
	// The stream's frames and inputs share one controller id: the node
	// refuses its inputs once another stream of the player takes the slot.
	controller := newControllerID()
	inputs := &playInputs{s: s, c: c, gameID: start.GameId, controller: controller, send: send, wake: make(chan struct{}, 1)}
	go func() {
		if err := s.receiveInputs(c, stream, inputs); err != nil {
			cancel(err)
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := inputs.run(ctx, owner.Load); err != nil {
			cancel(err)
		}
	}()
	err = s.streamGame(ctx, c, kindPlay, start.GameId, controller, start.AcceptEncodings, start.Delivery, frameSink{
		frame: func(f *ludusv1.Frame) error {
			return send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: f}})
		},
		status: func(st *ludusv1.Status) error {
			return send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: st}})
		},
		attached: func(n clusterstate.NodeInfo) { owner.Store(&n) },
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
func (s *gameService) receiveInputs(c *auth.Claims, stream *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse], inputs *playInputs) error {
	var last uint64
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
		if in.Seq <= last {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(
				"input seq %d after %d: on a Play stream every input's seq must be higher than the one before (the stream re-sends unacknowledged inputs itself)", in.Seq, last))
		}
		last = in.Seq
		if !inputs.add(pendingInput{seq: in.Seq, payload: in.Payload}) {
			s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "pending_inputs").Inc()
			max := s.g.limits.MaxPendingInputs
			return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"%d inputs are waiting for their acknowledgement (the limit is %d); wait for acks before sending more", max, max))
		}
	}
}
