package simnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/inputlog"
)

// What an input acknowledgement means (docs/API.md, "Inputs"): an OK reply
// says that this input's own seq is in the durable log or, for games whose
// inputs are state (latest wins), that a later input of the player superseded
// it and that one is durable. Event games apply every input once, in seq
// order: an input that arrives before a lower one is held in a bounded window
// until the gap fills, and refused with the missing seq if it does not.

// Input window of event games.
const (
	// inputWindow is how far ahead of the next expected seq an input may be.
	inputWindow = 64
	// gapTimeout is how long an early input waits for the ones before it.
	gapTimeout = time.Second
)

// The input log's size. A game's log lives in etcd, which every game of the
// cluster shares, until the game is archived, and an archive holds at most
// 64 MiB (backend.MaxArchiveBytes): a log past that could never be archived
// and would stay in etcd. So a game logs at most Config.MaxGameInputBytes of
// inputs on a node, and each player at most a share of it (an equal one, but
// never less than a sixteenth: a player who sends the largest inputs at the
// highest rate does not take the others'): past that, the player's inputs
// are refused (ResourceExhausted) and the game goes on. A game resumed on
// another node counts on from its log (restore).
const (
	// DefaultMaxGameInputBytes leaves room in an archive for the log's
	// chunk headers and state hashes (four chunks a second).
	DefaultMaxGameInputBytes = 24 << 20
	// inputEntryOverhead is what an input adds to the log besides its
	// payload (slot, seq, length), about.
	inputEntryOverhead = 16
)

// errInputBudget refuses an input past a player's share of the game's log.
var errInputBudget = errors.New("input log share used up")

// errLogBusy refuses an input that would make the game's next log chunk
// larger than maxChunkInputBytes; the client sends it again (Unavailable).
var errLogBusy = errors.New("the game's log is full until its next write")

// maxChunkInputBytes bounds the input bytes of one log chunk. A chunk is
// written in one etcd request, with the game's checkpoint (up to 512 KiB)
// beside it, and etcd refuses a request over 1.5 MiB; without a bound, a
// burst of inputs (every player's burst of the gateway's rate at once)
// built a chunk past that, the write was refused, and the game had to move
// to another node. A chunk past half of it is written at the end of its
// tick, whatever the flush interval.
const maxChunkInputBytes = 256 << 10

// inputBudget is how many input bytes one player may log in g.
func (g *game) inputBudget() int {
	total := g.n.cfg.MaxGameInputBytes
	return max(total/16, total/max(1, g.spec.MaxPlayers))
}

// errInputGap is the sentinel of inputGapError (Aborted, with an InputGap detail).
var errInputGap = errors.New("input arrived before a lower sequence number")

// inputGapError refuses an input of an event game that cannot be applied
// because a lower seq never arrived.
type inputGapError struct{ missing, refused uint64 }

func (e *inputGapError) Error() string {
	return fmt.Sprintf("input %d was not applied: input %d never arrived; inputs of this game apply in order, so send %d and then the ones after it again",
		e.refused, e.missing, e.missing)
}

func (e *inputGapError) Is(target error) bool { return target == errInputGap }

// heldInput is an early input of an event game.
type heldInput struct {
	inputReq
	until time.Time
}

// eventInputs reports whether the game applies every input in order.
func (g *game) eventInputs() bool { return g.spec.InputKind != abi.InputState }

func (g *game) input(m inputReq) {
	i, ok := g.accounts[m.account]
	if !ok {
		m.reply <- inputResult{err: errNotJoined}
		return
	}
	s := g.slots[i]
	if s.ctl.refuses(m.controller) {
		m.reply <- inputResult{err: errReplaced}
		return
	}
	switch {
	case m.seq == s.lastSeq:
		// A re-send of the input applied last: it rides along with (or after)
		// the chunk that holds the original.
		g.queuedAcks = append(g.queuedAcks, ackWaiter{reply: m.reply, seq: m.seq, tick: s.lastTick})
	case m.seq < s.lastSeq && g.eventInputs():
		// Event inputs apply in order, so every lower seq was applied: a re-send.
		g.queuedAcks = append(g.queuedAcks, ackWaiter{reply: m.reply, seq: m.seq})
	case m.seq < s.lastSeq:
		// State input overtaken by a later one: not applied, and said so.
		g.queuedAcks = append(g.queuedAcks, ackWaiter{reply: m.reply, seq: m.seq, tick: s.lastTick, supersededBy: s.lastSeq})
	case g.chunkBytes+len(m.payload)+inputEntryOverhead > maxChunkInputBytes:
		m.reply <- inputResult{err: nodeErrorf(errLogBusy,
			"this game's inputs reached %d bytes since its log's last write, the most one write takes: send the input again in a moment",
			g.chunkBytes)}
	case s.logged+len(m.payload)+inputEntryOverhead > g.inputBudget() ||
		g.logged+len(m.payload)+inputEntryOverhead > g.n.cfg.MaxGameInputBytes:
		m.reply <- inputResult{err: nodeErrorf(errInputBudget,
			"your inputs to this game reached %d bytes, the most one player may send in one game (its log must fit its archive): "+
				"send smaller or fewer inputs, or play on in a new game", s.logged)}
	case !g.eventInputs() || m.seq == s.lastSeq+1:
		g.apply(i, s, m)
		g.applyHeld(i, s)
	case m.seq-s.lastSeq > inputWindow:
		m.reply <- inputResult{err: &inputGapError{missing: s.lastSeq + 1, refused: m.seq}}
	default:
		if s.held == nil {
			s.held = map[uint64]heldInput{}
		}
		if old, dup := s.held[m.seq]; dup {
			old.reply <- inputResult{err: &inputGapError{missing: s.lastSeq + 1, refused: m.seq}}
		}
		s.held[m.seq] = heldInput{inputReq: m, until: time.Now().Add(gapTimeout)}
	}
}

// apply queues one input for the next step; its ack waits for the chunk.
func (g *game) apply(i int, s *slot, m inputReq) {
	s.lastSeq, s.lastTick = m.seq, g.inst.Tick()
	ev := abi.Event{Kind: abi.EventInput, Slot: uint8(i), Payload: m.payload}
	g.events = append(g.events, ev)
	g.entries = append(g.entries, inputlog.Entry{Event: ev, Seq: m.seq})
	s.logged += len(m.payload) + inputEntryOverhead
	g.logged += len(m.payload) + inputEntryOverhead
	g.chunkBytes += len(m.payload) + inputEntryOverhead
	g.queuedAcks = append(g.queuedAcks, ackWaiter{reply: m.reply, seq: m.seq, tick: s.lastTick})
}

// applyHeld applies the held inputs that now follow in order.
func (g *game) applyHeld(i int, s *slot) {
	for len(s.held) > 0 {
		h, ok := s.held[s.lastSeq+1]
		if !ok {
			return
		}
		delete(s.held, h.seq)
		g.apply(i, s, h.inputReq)
	}
}

// expireHeld refuses held inputs whose gap did not fill in time; the client
// re-sends from the missing seq.
func (g *game) expireHeld(now time.Time) {
	for _, s := range g.slots {
		expired := false
		for _, h := range s.held {
			if now.After(h.until) {
				expired = true
				break
			}
		}
		if !expired {
			continue
		}
		// One gap blocks every later input: refuse them all, lowest first.
		for seq, h := range s.held {
			h.reply <- inputResult{err: &inputGapError{missing: s.lastSeq + 1, refused: seq}}
			delete(s.held, seq)
		}
	}
}

// Inputs is the pipelined input path of a Play stream: the gateway sends one
// player's inputs in order; each goes to the game's actor as it arrives (it is
// applied at the next tick), and its acknowledgement is sent back once durable,
// in order. An error ends the stream; the gateway re-sends what is unacknowledged
// to the game's owner.
func (s *service) Inputs(ctx context.Context, stream *connect.BidiStream[clusterv1.InputsRequest, clusterv1.InputsResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	if first.AccountId == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message of an Inputs stream names the tenant, game and account"))
	}
	g, err := s.lookup(first.TenantId, first.GameId)
	if err != nil {
		return err
	}
	// The Play stream the inputs come from: refused once another stream of
	// the player took its slot over (control.go).
	controller := stream.RequestHeader().Get(ControllerHeader)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// replies are answered in order by the actor and the log writer; the sender
	// forwards them in the order the inputs arrived. Its capacity bounds the
	// inputs in flight on one stream (the receive loop blocks beyond it).
	replies := make(chan inputReq, 256)
	sent := make(chan error, 1)
	go func() {
		sent <- s.sendAcks(ctx, stream, replies)
	}()
	recvErr := func() error {
		m := first
		for {
			if m.Seq > 0 {
				if len(m.Payload) > maxPayloadBytes {
					return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("input payload is %d bytes; the limit is %d", len(m.Payload), maxPayloadBytes))
				}
				req := inputReq{account: first.AccountId, controller: controller, seq: m.Seq, payload: append([]byte(nil), m.Payload...), reply: make(chan inputResult, 1)}
				if err := g.send(ctx, req); err != nil {
					return connectError(err)
				}
				select {
				case replies <- req:
				case <-ctx.Done():
					return nil
				}
			}
			var err error
			if m, err = stream.Receive(); err != nil {
				return nil // the gateway closed its side (or went away): finish the acks
			}
		}
	}()
	close(replies)
	if recvErr != nil {
		cancel(recvErr)
		<-sent
		return recvErr
	}
	return <-sent
}

// sendAcks answers the stream's inputs in order as their replies arrive.
func (s *service) sendAcks(ctx context.Context, stream *connect.BidiStream[clusterv1.InputsRequest, clusterv1.InputsResponse], replies <-chan inputReq) error {
	for req := range replies {
		var r inputResult
		select {
		case r = <-req.reply:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if r.err != nil {
			return connectError(r.err)
		}
		if err := stream.Send(&clusterv1.InputsResponse{AckedSeq: r.ackedSeq, Tick: r.tick, SupersededBySeq: r.supersededBy}); err != nil {
			return err
		}
	}
	return nil
}

// inputGapDetail is the Connect error of an input gap, with its InputGap detail.
func inputGapDetail(err error) error {
	var gap *inputGapError
	if !errors.As(err, &gap) {
		return connect.NewError(connect.CodeAborted, err)
	}
	ce := connect.NewError(connect.CodeAborted, err)
	if d, derr := connect.NewErrorDetail(&ludusv1.InputGap{MissingSeq: gap.missing, RefusedSeq: gap.refused}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}
