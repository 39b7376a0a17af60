package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/gateway/framecodec"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/sdk/abi"
)

// Mode is what a session's stream carries.
type Mode int

const (
	// Auto: Snapshots when the game's module has a renderer, else Pixels.
	Auto Mode = iota
	// Snapshots: the node sends the module's snapshots; the client draws them
	// with the module's ludus_render.
	Snapshots
	// Pixels: the node draws the views and sends them.
	Pixels
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Snapshots:
		return "snapshots"
	case Pixels:
		return "pixels"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads "auto", "snapshots" or "pixels".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return Auto, nil
	case "snapshots", "snapshot":
		return Snapshots, nil
	case "pixels", "pixel":
		return Pixels, nil
	}
	return Auto, fmt.Errorf("unknown mode %q: want auto, snapshots or pixels", s)
}

// Frame is one decoded view.
type Frame struct {
	// Tick is the game tick the view shows.
	Tick int64
	// View is the whole view: an indexed8 frame (docs/ABI.md) for every game
	// that has snapshots, else in the module's view_format (Format). It
	// belongs to the receiver.
	View []byte
	// Format is the view format, e.g. "indexed8".
	Format string
	// Local: drawn on this machine from a snapshot by the module's
	// ludus_render; false for pixels drawn by the node.
	Local bool
	// RenderTime is how long the local render took (0 for pixels).
	RenderTime time.Duration
}

// Indexed8 parses the frame as an indexed8 view.
func (f *Frame) Indexed8() (width, height int, palette, pixels []byte, err error) {
	return abi.ParseIndexed8(f.View)
}

// Ack reports that inputs are durable in the game's log (docs/API.md,
// "Inputs"). Acks are cumulative: every input sent before Input is resolved
// too.
type Ack struct {
	// Input is the number Send returned for the acknowledged input.
	Input uint64
	// Seq is its sequence number on the wire.
	Seq uint64
	// Tick at which it (or the input that superseded it) was applied.
	Tick int64
	// SupersededBy, if not 0, is the seq of a later input that replaced this
	// one before it was applied (state inputs: nothing was lost).
	SupersededBy uint64
	// Latency is the time from Send to this acknowledgement.
	Latency time.Duration
}

// NoticeKind says what a Notice is about.
type NoticeKind int

const (
	// NoticeFallback: the session left snapshot mode for pixels, for good;
	// Err says why.
	NoticeFallback NoticeKind = iota + 1
	// NoticeRenderFailed: one local render failed; the renderer is replaced.
	NoticeRenderFailed
	// NoticeMigrating: the game is moving to another node; frames pause.
	NoticeMigrating
	// NoticeMigrated: the stream re-attached to the game's new node.
	NoticeMigrated
	// NoticeReconnecting: the stream broke and is being opened again; Err
	// says why. Unacknowledged inputs are re-sent with their seqs.
	NoticeReconnecting
	// NoticeInputsRenumbered: the game refused an input because an earlier seq
	// never arrived (InputGap); the unacknowledged inputs are sent again from
	// the missing seq.
	NoticeInputsRenumbered
)

func (k NoticeKind) String() string {
	switch k {
	case NoticeFallback:
		return "fallback"
	case NoticeRenderFailed:
		return "render-failed"
	case NoticeMigrating:
		return "migrating"
	case NoticeMigrated:
		return "migrated"
	case NoticeReconnecting:
		return "reconnecting"
	case NoticeInputsRenumbered:
		return "inputs-renumbered"
	}
	return fmt.Sprintf("NoticeKind(%d)", int(k))
}

// Notice is something that happened to a session's stream.
type Notice struct {
	Kind    NoticeKind
	Message string
	Err     error
	// MigrationMS, for NoticeMigrated: how long the stream was moving.
	MigrationMS int64
}

func (n Notice) String() string {
	if n.Err != nil {
		return fmt.Sprintf("%s: %s: %v", n.Kind, n.Message, n.Err)
	}
	return fmt.Sprintf("%s: %s", n.Kind, n.Message)
}

// Stats are a session's counters since it started.
type Stats struct {
	// FramesReceived and BytesReceived count Frame messages (snapshots or
	// pixels) and their encoded payload bytes (Frame.view as sent, zstd delta
	// coded; protobuf and HTTP/2 framing not included).
	FramesReceived int64
	BytesReceived  int64
	// Keyframes among the frames received.
	Keyframes int64
	// FramesOut counts frames handed to Frames(); FramesDropped those replaced
	// by a newer one before anyone took them, and snapshots replaced by a newer
	// one before they were rendered.
	FramesOut     int64
	FramesDropped int64
	// Rendered, RenderTime and RenderFailures count local renders.
	Rendered       int64
	RenderTime     time.Duration
	RenderFailures int64
	// Reconnects counts streams opened after the first; Migrations the
	// re-attaches across handoffs and failovers reported by the gateway.
	Reconnects int64
	Migrations int64
}

// Limits of a session's inputs.
const (
	// MaxInputBytes is the largest input payload the gateway accepts.
	MaxInputBytes = 256
	// MaxPendingInputs is how many inputs may wait for their ack (the gateway
	// ends a Play stream beyond 64).
	MaxPendingInputs = 48
)

// Errors of a session.
var (
	// ErrGameEnded: the match is over.
	ErrGameEnded = errors.New("client: the game ended")
	// ErrSessionClosed: Send after the session ended.
	ErrSessionClosed = errors.New("client: the session is closed")
	// ErrInputBacklog: MaxPendingInputs inputs wait for their acks; wait for acks.
	ErrInputBacklog = errors.New("client: too many inputs wait for their acknowledgement")
)

// Internal causes of a stream's end.
var (
	errFallback = errors.New("switching to pixels")
	errResync   = errors.New("frame stream out of step")
	errClosed   = errors.New("session closed")
	errNoEnd    = errors.New("the stream ended without the game ending")
	errStalled  = errors.New("the stream went silent for longer than the gateway ever is while a game runs")
)

// Render-failure policy: a failed renderer is replaced; this many failures
// within renderFailureWindow fall back to pixels.
const (
	maxRenderFailures   = 3
	renderFailureWindow = 30 * time.Second
)

// Reconnection policy: backoff between attempts, and how long a stream may
// fail to deliver anything before the session gives up.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// giveUpAfter, stallTimeout and migratingStallTimeout are variables only so
// that tests can shorten them.
var (
	giveUpAfter = 30 * time.Second
	// stallTimeout: a stream silent this long is presumed dead (a frozen
	// gateway, a half-open path) and re-opened. The gateway relays the node's
	// status at least every flush interval (250 ms) while the game runs, so
	// 5 s leaves ample margin.
	stallTimeout = 5 * time.Second
	// migratingStallTimeout replaces stallTimeout after a "migrating" status:
	// the gateway may wait up to 30 s for the game's new owner in silence.
	migratingStallTimeout = 35 * time.Second
	// healthyStream: a stream that delivered for this long restores the
	// give-up clock.
	healthyStream = 5 * time.Second
)

// Session is one player's Play stream of one game, re-opened as needed: it
// delivers frames, sends inputs and reports acks. Its methods are safe for
// concurrent use.
type Session struct {
	c    *Client
	game *ludusv1.GameInfo
	slot int

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	err    error // why the session ended; set before done closes

	mu           sync.Mutex
	mode         Mode
	fallbackErr  error
	streamCancel context.CancelCauseFunc
	status       *ludusv1.Status

	outMu     sync.Mutex
	outClosed bool
	frames    chan *Frame
	acks      chan Ack
	notices   chan Notice

	inMu     sync.Mutex
	nextID   uint64
	nextSeq  uint64
	pending  []pendingInput // unacknowledged, in seq order
	ackedSeq uint64
	ackedID  uint64
	inWake   chan struct{}

	// Rendering: the newest snapshot waits in rpending for the render loop,
	// which alone uses rend.
	rmu       sync.Mutex
	rpending  *snapshot
	rwake     chan struct{}
	rdone     chan struct{}
	rend      frameRenderer
	rendBuild string

	st struct {
		framesReceived, bytesReceived, keyframes, framesOut, framesDropped atomic.Int64
		rendered, renderNanos, renderFailures, reconnects, migrations      atomic.Int64
	}
}

type pendingInput struct {
	id      uint64
	seq     uint64
	payload []byte
	sent    time.Time
}

type snapshot struct {
	tick  int64
	build string
	data  []byte
}

// Play joins the game (JoinGame is idempotent) and opens its Play stream in
// mode. Auto picks Snapshots when the game's module has a renderer.
//
// For Snapshots the module is fetched, verified and compiled first (seconds
// the first time a Client sees a build, unless WithCompilationCache has it),
// so that frames flow as soon as the stream opens. If that fails, or the
// module has no renderer, the session starts in Pixels instead: Mode reports
// it, Fallback says why and a NoticeFallback is queued. The same happens later
// if the renderer fails repeatedly or the gateway refuses snapshots.
//
// ctx bounds the whole session, not only the setup: the session ends when ctx
// is done, Close is called, the game ends, the game refuses an input for good
// (ResourceExhausted naming no wait, twice for the same input), or the stream
// cannot be restored for 30 s (a stream silent for 5 s counts as broken; only
// one that delivered for 5 s counts as restored).
func (c *Client) Play(ctx context.Context, gameID string, mode Mode) (*Session, error) {
	game, slot, err := c.Join(ctx, gameID)
	if err != nil {
		return nil, err
	}
	s := &Session{
		c: c, game: game, slot: slot,
		done:    make(chan struct{}),
		frames:  make(chan *Frame, 1),
		acks:    make(chan Ack, 256),
		notices: make(chan Notice, 64),
		nextSeq: uint64(time.Now().UnixMilli()),
		inWake:  make(chan struct{}, 1),
		rwake:   make(chan struct{}, 1),
		rdone:   make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	if mode == Auto {
		mode = Pixels
		if game.SnapshotFormat != "" {
			mode = Snapshots
		}
	}
	s.mode = mode
	if mode == Snapshots {
		if game.SnapshotFormat == "" {
			s.fallback(fmt.Errorf("the %s module has no renderer (no snapshot_format), so the game streams pixels only", game.ModuleName))
		} else if r, err := c.openRenderer(s.ctx, game.BuildId); err != nil {
			if ctx.Err() != nil {
				s.cancel(nil)
				return nil, ctx.Err()
			}
			s.fallback(err)
		} else {
			s.rend, s.rendBuild = r, game.BuildId
		}
	}
	if s.Mode() == Snapshots {
		go s.renderLoop()
	} else {
		close(s.rdone)
	}
	go s.run()
	return s, nil
}

// Game is the game as JoinGame described it.
func (s *Session) Game() *ludusv1.GameInfo { return s.game }

// Slot is the player's slot in the game.
func (s *Session) Slot() int { return s.slot }

// Mode is the current delivery mode: Snapshots or Pixels.
func (s *Session) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// Fallback is why the session left (or never entered) snapshot mode, or nil.
func (s *Session) Fallback() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fallbackErr
}

// Status is the latest status message of the stream (nil before the first).
func (s *Session) Status() *ludusv1.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Frames delivers the newest frame: when the receiver is behind, older frames
// are dropped. It is closed when the session ends.
func (s *Session) Frames() <-chan *Frame { return s.frames }

// Acks delivers input acknowledgements; if nobody reads them, the oldest are
// dropped (acks are cumulative). Closed when the session ends.
func (s *Session) Acks() <-chan Ack { return s.acks }

// Notices delivers what happens to the stream (fallback, migration,
// reconnects); the oldest are dropped if nobody reads them. Closed when the
// session ends.
func (s *Session) Notices() <-chan Notice { return s.notices }

// Acked is the highest input number (as Send returned) acknowledged so far.
func (s *Session) Acked() uint64 {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	return s.ackedID
}

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended: nil after Close, ErrGameEnded, the context's
// error, or the error that could not be recovered from. Nil while running.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close ends the session and waits for its goroutines.
func (s *Session) Close() error {
	s.cancel(errClosed)
	<-s.done
	return nil
}

// Stats returns the session's counters.
func (s *Session) Stats() Stats {
	return Stats{
		FramesReceived: s.st.framesReceived.Load(), BytesReceived: s.st.bytesReceived.Load(),
		Keyframes: s.st.keyframes.Load(), FramesOut: s.st.framesOut.Load(), FramesDropped: s.st.framesDropped.Load(),
		Rendered: s.st.rendered.Load(), RenderTime: time.Duration(s.st.renderNanos.Load()),
		RenderFailures: s.st.renderFailures.Load(), Reconnects: s.st.reconnects.Load(), Migrations: s.st.migrations.Load(),
	}
}

// Send queues one input (at most MaxInputBytes) and returns its number in
// this session (1, 2, 3, …), which Acks refer to. Inputs are sent in order
// with increasing seqs, applied at the game's next tick, and re-sent with the
// same seqs if the stream is re-opened. The gateway allows an account about
// 60 inputs per second; send when the input changes.
func (s *Session) Send(payload []byte) (uint64, error) {
	if len(payload) > MaxInputBytes {
		return 0, fmt.Errorf("client: input of %d bytes; the limit is %d", len(payload), MaxInputBytes)
	}
	select {
	case <-s.done:
		return 0, ErrSessionClosed
	default:
	}
	s.inMu.Lock()
	if len(s.pending) >= MaxPendingInputs {
		s.inMu.Unlock()
		return 0, ErrInputBacklog
	}
	s.nextID++
	in := pendingInput{id: s.nextID, seq: s.nextSeq, payload: bytes.Clone(payload), sent: time.Now()}
	s.nextSeq++
	s.pending = append(s.pending, in)
	s.inMu.Unlock()
	select {
	case s.inWake <- struct{}{}:
	default:
	}
	return in.id, nil
}

// fallback leaves snapshot mode for good and re-opens the stream for pixels.
func (s *Session) fallback(reason error) {
	s.mu.Lock()
	if s.mode != Snapshots {
		s.mu.Unlock()
		return
	}
	s.mode, s.fallbackErr = Pixels, reason
	cancel := s.streamCancel
	s.mu.Unlock()
	s.notify(Notice{Kind: NoticeFallback, Message: "rendering snapshots locally failed; the game now streams pixels drawn by the server", Err: reason})
	if cancel != nil {
		cancel(errFallback)
	}
}

// offer sends v on ch without blocking, dropping the oldest queued values to
// make room (readers want the newest); it reports how many it dropped.
func offer[T any](ch chan T, v T) (dropped int64) {
	for {
		select {
		case ch <- v:
			return dropped
		default:
		}
		select {
		case <-ch:
			dropped++
		default:
		}
	}
}

// notify queues a notice, dropping the oldest when nobody reads them.
func (s *Session) notify(n Notice) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.outClosed {
		offer(s.notices, n)
	}
}

// deliver hands out a frame, replacing one nobody took yet.
func (s *Session) deliver(f *Frame) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.outClosed {
		s.st.framesDropped.Add(offer(s.frames, f))
		s.st.framesOut.Add(1)
	}
}

// pushAck hands out an ack, dropping the oldest unread (acks are cumulative).
func (s *Session) pushAck(a Ack) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if !s.outClosed {
		offer(s.acks, a)
	}
}

// run opens the stream, and opens it again after whatever broke it, until the
// session ends.
func (s *Session) run() {
	var err error
	defer func() { s.finish(err) }()
	backoff := minBackoff
	var failingSince time.Time
	gaps, gapAcked := 0, uint64(0) // InputGap refusals in a row, and Acked() then
	rejoined := false              // took the seat again since the last frame
	var lastResync time.Time
	var refusedHead uint64 // the head input of the last refusal that named no wait
	for first := true; ; first = false {
		if !first {
			s.st.reconnects.Add(1)
		}
		mode := s.Mode()
		opened := time.Now()
		var gotFrame bool
		var lastMsg time.Time
		gotFrame, lastMsg, err = s.stream(mode)
		if s.ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrGameEnded) || errors.Is(err, errGameFailed) {
			return
		}
		if s.Mode() != mode {
			continue // fell back to pixels: re-open at once
		}
		if gotFrame {
			backoff, rejoined = minBackoff, false
			// Only a stream that delivered for a while restores the give-up
			// clock: one that breaks at once each time (an input refused,
			// a stall) must not keep the session alive for ever.
			if lastMsg.Sub(opened) >= healthyStream {
				failingSince = time.Time{}
			}
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		code, over := connect.CodeOf(err), gameOver(err)
		head := uint64(0)
		if code == connect.CodeResourceExhausted && !lastMsg.IsZero() && !namesWait(err) {
			head = s.pendingHead()
		}
		if head != 0 && head == refusedHead {
			// The game refused the same input twice without naming a wait
			// (the player's share of the input log is used up): for good.
			return
		}
		refusedHead = head
		switch {
		case errors.Is(err, errResync):
			// Once in a while, re-open at once (a new stream starts with a
			// keyframe); a stream that keeps failing gets the backoff.
			if time.Since(lastResync) > 5*time.Second {
				lastResync = time.Now()
				s.notify(Notice{Kind: NoticeReconnecting, Message: "a frame could not be decoded; re-opening the stream (it starts with a keyframe)", Err: err})
				continue
			}
		case over != nil:
			// A new stream to a game that ended meanwhile: no final status
			// came, the refusal says it.
			err = over
			return
		case code == connect.CodeFailedPrecondition && mode == Snapshots && !gotFrame && strings.Contains(err.Error(), "DELIVERY_PIXELS"):
			s.fallback(err) // the module has no renderer after all
			continue
		case code == connect.CodeFailedPrecondition && strings.Contains(err.Error(), "join the game") && !rejoined:
			// Away longer than the game keeps a seat (30 s without a stream):
			// take a seat again and go on at once.
			rejoined = true
			jctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			_, _, jerr := s.c.Join(jctx, s.game.GameId)
			cancel()
			if jerr == nil {
				s.notify(Notice{Kind: NoticeReconnecting, Message: "the game had given the seat up; took it again", Err: err})
				continue
			}
		case code == connect.CodeAborted:
			gap, ok := inputGap(err)
			if acked := s.Acked(); acked > gapAcked {
				gaps, gapAcked = 0, acked // inputs went through since the last gap
			}
			if !ok || gaps >= 3 || !s.renumber(gap) {
				return
			}
			gaps++
			s.notify(Notice{Kind: NoticeInputsRenumbered, Message: fmt.Sprintf("the game expects input seq %d next; re-sending from there", gap.MissingSeq), Err: err})
			continue
		case code == connect.CodeUnauthenticated:
			s.c.expireTicket(s.c.currentTicket())
		case retryable(err):
		default:
			return // not found, game over, invalid: nothing to retry
		}
		if time.Since(failingSince) > giveUpAfter {
			err = fmt.Errorf("client: the stream could not be restored for %v: %w", giveUpAfter, err)
			return
		}
		if code == connect.CodeResourceExhausted {
			backoff = max(backoff, time.Second) // a limit: give it time
		}
		s.notify(Notice{Kind: NoticeReconnecting, Message: fmt.Sprintf("the stream broke; re-opening in %v", backoff), Err: err})
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// retryAfter is a wait named by a refusal's message ("retry in 12 s").
var retryAfter = regexp.MustCompile(`retry in \d+ ?s\b`)

// namesWait reports whether a refusal says how long to wait (Retry-After in
// its metadata, or "retry in N s" in its message).
func namesWait(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	return ce.Meta().Get("Retry-After") != "" || retryAfter.MatchString(ce.Message())
}

// pendingHead is the seq of the oldest unacknowledged input, 0 if none.
func (s *Session) pendingHead() uint64 {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	if len(s.pending) == 0 {
		return 0
	}
	return s.pending[0].seq
}

// retryable: the stream may work again if re-opened (docs/API.md, "Error
// codes"), including transport errors, which carry no code.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeCanceled, connect.CodeDeadlineExceeded,
		connect.CodeResourceExhausted, connect.CodeUnknown, connect.CodeInternal:
		return true
	}
	return errors.Is(err, errNoEnd) || errors.Is(err, errStalled)
}

// inputGap returns the InputGap detail of an Aborted error.
func inputGap(err error) (*ludusv1.InputGap, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if g, ok := v.(*ludusv1.InputGap); ok {
				return g, true
			}
		}
	}
	return nil, false
}

// renumber gives the unacknowledged inputs from the missing seq on new,
// consecutive seqs starting there (the game applies event inputs in seq
// order, and never saw them). It reports whether anything changed.
func (s *Session) renumber(gap *ludusv1.InputGap) bool {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	i := 0
	for i < len(s.pending) && s.pending[i].seq < gap.MissingSeq {
		i++
	}
	if i == len(s.pending) || gap.MissingSeq == 0 {
		return false
	}
	next := gap.MissingSeq
	for j := i; j < len(s.pending); j++ {
		s.pending[j].seq = next
		next++
	}
	s.nextSeq = next
	s.ackedSeq = min(s.ackedSeq, gap.MissingSeq-1)
	return true
}

// errGameFailed wraps the message of a match that failed.
var errGameFailed = errors.New("client: the game failed")

// gameOverRefusal is the gateway's refusal of a stream to a game that is
// over: "game X is ended", "game X is failed", "game X failed: why".
var gameOverRefusal = regexp.MustCompile(`^game \S+ (?:is (\w+)|failed: (.*))$`)

// gameOver returns ErrGameEnded, or errGameFailed with the reason, for a
// refusal of a stream because the game is over; nil for any other error.
func gameOver(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
		return nil
	}
	m := gameOverRefusal.FindStringSubmatch(ce.Message())
	switch {
	case m == nil:
		return nil
	case m[1] == "ended":
		return ErrGameEnded
	case m[1] != "":
		return fmt.Errorf("%w: the game is %s", errGameFailed, m[1])
	}
	return fmt.Errorf("%w: %s", errGameFailed, m[2])
}

// finish ends the session: stops the render loop and closes the channels.
func (s *Session) finish(err error) {
	cause := context.Cause(s.ctx)
	s.cancel(errClosed)
	<-s.rdone
	switch {
	case errors.Is(cause, errClosed):
		err = nil
	case cause != nil:
		err = cause
	}
	s.err = err
	s.outMu.Lock()
	s.outClosed = true
	close(s.frames)
	close(s.acks)
	close(s.notices)
	s.outMu.Unlock()
	close(s.done)
}

// stream runs one Play stream in mode until it ends. gotFrame reports whether
// any frame arrived, lastMsg when the last message did (zero if none).
func (s *Session) stream(mode Mode) (gotFrame bool, lastMsg time.Time, err error) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	s.mu.Lock()
	s.streamCancel = cancel
	fellBack := s.mode != mode
	s.mu.Unlock()
	if fellBack {
		return false, time.Time{}, errFallback
	}
	if _, err := s.c.Ticket(ctx); err != nil {
		return false, time.Time{}, connect.NewError(connect.CodeUnauthenticated, err)
	}
	delivery := ludusv1.Delivery_DELIVERY_PIXELS
	if mode == Snapshots {
		delivery = ludusv1.Delivery_DELIVERY_SNAPSHOTS
	}
	st := s.c.games.Play(ctx)
	defer st.CloseResponse()
	// Once the response has begun, HTTP/2 notices a cancelled context only
	// when the request body ends, which a Play stream's never does: closing
	// the response resets the stream and ends a blocked Receive.
	stopClose := context.AfterFunc(ctx, func() { _ = st.CloseResponse() })
	defer stopClose()
	if err := st.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{
		GameId: s.game.GameId, Delivery: delivery,
		AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD},
	}}}); err != nil && !errors.Is(err, io.EOF) {
		return false, time.Time{}, err // io.EOF: the server answered already; Receive tells
	}
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		s.sendInputs(ctx, st)
	}()
	defer func() { cancel(nil); <-sendDone }()

	var dec framecodec.Decoder
	lastTick := int64(-1) // the delta base's tick
	build, format := s.game.BuildId, s.game.ViewFormat
	var final *ludusv1.Status
	// The watchdog: a stream silent for its bound is cancelled, which the
	// run loop re-opens like any broken stream.
	stall := time.AfterFunc(stallTimeout, func() {
		cancel(errStalled)
	})
	defer stall.Stop()
	for {
		m, rerr := st.Receive()
		if rerr == nil {
			lastMsg = time.Now()
			bound := stallTimeout
			if stt := m.GetStatus(); stt != nil && stt.State == "migrating" {
				bound = migratingStallTimeout
			}
			stall.Reset(bound)
		}
		if rerr != nil {
			if cause := context.Cause(ctx); ctx.Err() != nil && s.ctx.Err() == nil && cause != nil {
				return gotFrame, lastMsg, cause // fallback
			}
			if errors.Is(rerr, io.EOF) {
				switch {
				case final != nil && final.State == "ended":
					return gotFrame, lastMsg, ErrGameEnded
				case final != nil:
					return gotFrame, lastMsg, fmt.Errorf("%w: %s", errGameFailed, final.Message)
				}
				return gotFrame, lastMsg, errNoEnd
			}
			return gotFrame, lastMsg, rerr
		}
		switch v := m.Msg.(type) {
		case *ludusv1.PlayResponse_Ack:
			s.onAck(v.Ack)
		case *ludusv1.PlayResponse_Status:
			stt := v.Status
			if stt.BuildId != "" {
				build = stt.BuildId
			}
			if stt.ViewFormat != "" {
				format = stt.ViewFormat
			}
			if stt.State == "ended" || stt.State == "failed" {
				final = stt
			}
			if s.onStatus(stt, mode) {
				return gotFrame, lastMsg, errFallback
			}
		case *ludusv1.PlayResponse_Frame:
			f := v.Frame
			s.st.framesReceived.Add(1)
			s.st.bytesReceived.Add(int64(len(f.View)))
			view := f.View
			switch f.Encoding {
			case ludusv1.FrameEncoding_FRAME_ENCODING_UNSPECIFIED, ludusv1.FrameEncoding_FRAME_ENCODING_RAW:
				s.st.keyframes.Add(1)
			default:
				if f.Keyframe {
					s.st.keyframes.Add(1)
				} else if f.BaseTick != lastTick {
					return gotFrame, lastMsg, fmt.Errorf("%w: a delta on tick %d's frame arrived, the last frame was tick %d's", errResync, f.BaseTick, lastTick)
				}
				view, err = dec.Decode(f.View)
				if err != nil {
					return gotFrame, lastMsg, fmt.Errorf("%w: %v", errResync, err)
				}
			}
			lastTick, gotFrame = f.Tick, true
			if mode == Snapshots {
				s.submit(&snapshot{tick: f.Tick, build: build, data: bytes.Clone(view)})
			} else {
				s.deliver(&Frame{Tick: f.Tick, View: bytes.Clone(view), Format: format})
			}
		}
	}
}

// onStatus notes a status message; it reports whether the stream must be
// re-opened for pixels (the gateway sent pixels when snapshots were asked).
func (s *Session) onStatus(st *ludusv1.Status, mode Mode) (reopen bool) {
	s.mu.Lock()
	s.status = st
	s.mu.Unlock()
	switch {
	case st.State == "migrating":
		s.notify(Notice{Kind: NoticeMigrating, Message: st.Message})
	case st.MigrationMs > 0 || st.PreviousNodeId != "":
		s.st.migrations.Add(1)
		s.notify(Notice{Kind: NoticeMigrated, Message: st.Message, MigrationMS: st.MigrationMs})
	}
	if mode == Snapshots && st.Delivery == "pixels" {
		s.fallback(errors.New("the gateway sends pixels although snapshots were asked for"))
		return true
	}
	return false
}

// sendInputs sends the stream's inputs: every unacknowledged one, then each
// new one, in seq order. A failed send shows as a failed Receive.
func (s *Session) sendInputs(ctx context.Context, st *connect.BidiStreamForClient[ludusv1.PlayRequest, ludusv1.PlayResponse]) {
	var sent uint64 // the highest seq sent on this stream
	for {
		s.inMu.Lock()
		var batch []pendingInput
		for _, in := range s.pending {
			if in.seq > sent {
				batch = append(batch, in)
			}
		}
		s.inMu.Unlock()
		for _, in := range batch {
			if err := st.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: in.seq, Payload: in.payload}}}); err != nil {
				return
			}
			sent = in.seq
		}
		select {
		case <-ctx.Done():
			return
		case <-s.inWake:
		}
	}
}

// onAck resolves the inputs an ack covers and reports the newest of them.
func (s *Session) onAck(a *ludusv1.InputAck) {
	s.inMu.Lock()
	if a.AckedSeq <= s.ackedSeq {
		s.inMu.Unlock()
		return // acked again after a re-send
	}
	s.ackedSeq = a.AckedSeq
	var last pendingInput
	n := 0
	for len(s.pending) > 0 && s.pending[0].seq <= a.AckedSeq {
		last = s.pending[0]
		s.pending = s.pending[1:]
		n++
	}
	if n > 0 {
		s.ackedID = last.id
	}
	s.inMu.Unlock()
	if n > 0 {
		s.pushAck(Ack{Input: last.id, Seq: a.AckedSeq, Tick: a.Tick, SupersededBy: a.SupersededBySeq, Latency: time.Since(last.sent)})
	}
}

// submit hands the render loop the newest snapshot, replacing one it has not
// started on.
func (s *Session) submit(sn *snapshot) {
	s.rmu.Lock()
	if s.rpending != nil {
		s.st.framesDropped.Add(1)
	}
	s.rpending = sn
	s.rmu.Unlock()
	select {
	case s.rwake <- struct{}{}:
	default:
	}
}

// renderLoop draws the newest snapshot whenever one is waiting, on its own
// goroutine so that a slow render never holds up the stream. A failed
// renderer is replaced; repeated failures fall back to pixels.
func (s *Session) renderLoop() {
	defer close(s.rdone)
	defer func() {
		if s.rend != nil {
			_ = s.rend.Close(context.Background())
		}
	}()
	var failures []time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.rwake:
		}
		s.rmu.Lock()
		sn := s.rpending
		s.rpending = nil
		s.rmu.Unlock()
		if sn == nil || s.Mode() != Snapshots {
			continue
		}
		if s.rend != nil && sn.build != "" && sn.build != s.rendBuild {
			_ = s.rend.Close(context.Background())
			s.rend = nil
		}
		if s.rend == nil {
			build := sn.build
			if build == "" {
				build = s.game.BuildId
			}
			r, err := s.c.openRenderer(s.ctx, build)
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				s.fallback(err)
				continue
			}
			s.rend, s.rendBuild = r, build
		}
		t0 := time.Now()
		px, err := s.rend.Render(s.ctx, sn.data)
		took := time.Since(t0)
		if err == nil {
			if _, _, _, _, perr := abi.ParseIndexed8(px); perr != nil {
				err = fmt.Errorf("ludus_render returned no indexed8 frame: %w", perr)
			}
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			_ = s.rend.Close(context.Background())
			s.rend = nil
			s.st.renderFailures.Add(1)
			now := time.Now()
			failures = append(failures, now)
			for len(failures) > 0 && now.Sub(failures[0]) > renderFailureWindow {
				failures = failures[1:]
			}
			if len(failures) >= maxRenderFailures {
				s.fallback(fmt.Errorf("the module's renderer failed %d times within %v; the last time: %w", len(failures), renderFailureWindow, err))
				continue
			}
			s.notify(Notice{Kind: NoticeRenderFailed, Message: fmt.Sprintf("rendering tick %d failed; starting a new renderer", sn.tick), Err: err})
			continue
		}
		s.st.rendered.Add(1)
		s.st.renderNanos.Add(int64(took))
		s.deliver(&Frame{Tick: sn.tick, View: bytes.Clone(px), Format: abi.Indexed8Format, Local: true, RenderTime: took})
	}
}
