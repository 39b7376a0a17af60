package simnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// StateMoved is the stream status of a game that left this node (handoff,
// failover); clients reconnect and find its new owner.
const StateMoved = "moved"

// maxStatusResult bounds the result JSON a final status carries to players.
const maxStatusResult = 64 << 10

// maxLoggedResult is how much of a result the node's log line shows.
const maxLoggedResult = 4 << 10

// maxLag is how late a game may fall before it stops trying to catch up.
const maxLag = 500 * time.Millisecond

// Frame is one published view.
type Frame struct {
	Tick int64
	View []byte // immutable once published
}

// Status is a game's published status.
type Status struct {
	State   string
	Tick    int64
	Players int
	Message string
	// Result is the module's result JSON on an ended game's final status.
	Result []byte
}

// slot is one player slot. Only the actor writes account/name/lastSeq/held;
// viewers and frames are read by streams.
type slot struct {
	account string
	name    string
	// lastSeq is the highest input seq applied (stepped, or queued for the next
	// step) and lastTick the tick it applies at.
	lastSeq  uint64
	lastTick int64
	joinTick int64
	// held are inputs of an event game that arrived before a lower seq (inputs.go).
	held map[uint64]heldInput
	// logged is what this slot's inputs added to the game's input log on
	// this node, in bytes (inputs.go, inputBudget).
	logged int

	view *feed // the player's view, as its streams want it (views.go)
	// ctl is who controls the slot, and since when no stream has (control.go).
	ctl slotControl
}

// game is the actor of one match: one goroutine owns the instance and all state
// below; everything else talks to it through inbox and reads its cells.
type game struct {
	deadline deadline // the match's hard deadline (deadline.go)
	n        *Node
	sess     *clusterstate.Session // the lease the game was claimed under
	spec     clusterstate.GameSpec
	inst     *engine.Instance
	claim    clusterstate.Claim // owner key value and create revision (the fence)
	log      *slog.Logger
	// saidIgnored: the log has said once, at info level, that the module's
	// result holds fields that are not passed on.
	saidIgnored bool

	inbox chan any
	quit  chan string
	done  chan struct{}

	slots    []*slot
	accounts map[string]int
	specView *feed // the spectator camera
	drawer   *viewDrawer
	status   *cell[Status]

	events  []abi.Event      // applied at the next step
	entries []inputlog.Entry // for the next step, with accounts and seqs
	logged  int              // input bytes logged on this node, every slot's
	// chunkBytes is the input bytes applied since the last flush: the next
	// chunk's (maxChunkInputBytes).
	chunkBytes int
	pending    *inputlog.Chunk // not yet handed to the writer
	acks       []ackWaiter     // answered when pending is durable
	// queuedAcks belong to inputs in events, not yet stepped into pending.
	queuedAcks []ackWaiter
	logSeq     uint64
	players    int
	// lastFlush is when pending was last handed to the writer.
	lastFlush time.Time
	// hasCheckpoint: the module exports save/load; lastCheckpoint is the tick of
	// the newest checkpoint written (checkpoint.go).
	hasCheckpoint  bool
	lastCheckpoint int64
	// fencedByWriter is set when an append found the owner key changed.
	fencedByWriter atomic.Bool
	// durableTick is the end tick of the newest chunk the writer committed;
	// the actor does not step more than speculation ticks past it.
	durableTick atomic.Int64
	speculation int64
	// stalls counts ticks held back waiting for the log, and stepped is the
	// tick the actor last stepped to (tests, metrics; the actor owns inst).
	stalls  atomic.Int64
	stepped atomic.Int64

	// Scheduling: the game's place in the node's scheduler, and its metric
	// children resolved once (the tick path touches only atomics).
	ticket   *ticket
	dropped  prometheus.Counter
	tickTime prometheus.Counter

	// glog is the match's guest log on this node (guestlog.go).
	glog *guestLog

	// emptySince is when the game last had no player (zero while it has
	// some): it ends after Config.IdleEnd without (control.go).
	emptySince time.Time
}

type joinReq struct {
	account, name string
	reply         chan joinResult
}

type joinResult struct {
	slot int
	err  error
}

type inputReq struct {
	account string
	// controller is the client stream the input came from ("" for unary
	// inputs): inputs of a replaced controller are refused (control.go).
	controller string
	seq        uint64
	payload    []byte
	reply      chan inputResult
}

type inputResult struct {
	ackedSeq uint64
	tick     int64
	// supersededBy is set when the input was not applied because this later
	// input of the player replaced it (state inputs).
	supersededBy uint64
	err          error
}

// ackWaiter is an input's reply, answered once the chunk holding the input (or
// the input that superseded it) is durable.
type ackWaiter struct {
	reply        chan inputResult
	seq          uint64
	tick         int64
	supersededBy uint64
	// joined, if set, is a join's reply instead (slot is its answer): a join
	// is answered, like an input, once the chunk holding it is durable, so a
	// joined player never vanishes when the game moves.
	joined chan joinResult
	slot   int
}

// answer replies to the waiter: err nil means its chunk is durable.
func (a ackWaiter) answer(err error) {
	if a.joined != nil {
		a.joined <- joinResult{slot: a.slot, err: err}
		return
	}
	if err != nil {
		a.reply <- inputResult{err: err}
		return
	}
	a.reply <- inputResult{ackedSeq: a.seq, tick: a.tick, supersededBy: a.supersededBy}
}

type handoffReq struct {
	target clusterstate.NodeInfo
	reply  chan error
	at     *int64 // set to the tick the game moved at before reply gets nil
}

type slotReq struct {
	account string
	reply   chan int
}

func newGame(n *Node, sess *clusterstate.Session, spec clusterstate.GameSpec, mod *engine.Module, inst *engine.Instance, claim clusterstate.Claim) *game {
	// Specs written before a field existed take it from the build's metadata.
	if spec.SnapshotFormat == "" && mod.HasRenderer {
		spec.SnapshotFormat, spec.ViewWidth, spec.ViewHeight = mod.Meta.SnapshotFormat, mod.Meta.ViewWidth, mod.Meta.ViewHeight
	}
	if spec.InputKind == "" {
		spec.InputKind = mod.Meta.Inputs()
	}
	g := &game{
		n: n, sess: sess, spec: spec, inst: inst, claim: claim,
		inbox:    make(chan any, 1024),
		quit:     make(chan string, 1),
		done:     make(chan struct{}),
		accounts: map[string]int{},
		specView: newFeed(),
		status:   newCell(Status{State: clusterstate.StateRunning, Tick: inst.Tick()}),
		pending:  &inputlog.Chunk{},
	}
	g.stepped.Store(inst.Tick())
	g.log = slog.New(tickHandler{Handler: n.log.Handler(), tick: &g.stepped}).With("tenant", spec.TenantID, "game", spec.GameID, "build", spec.BuildID)
	g.useGuestLog(newGuestLog())
	g.slots = make([]*slot, spec.MaxPlayers)
	for i := range g.slots {
		g.slots[i] = &slot{view: newFeed()}
	}
	g.drawer = &viewDrawer{mod: mod, spec: spec, opts: n.instanceOptions(spec), log: g.log, maxView: n.cfg.MaxViewBytes}
	g.durableTick.Store(inst.Tick())
	g.speculation = max(1, int64(n.cfg.MaxSpeculation)*int64(spec.TickRate)/int64(time.Second))
	g.ticket = n.sched.newTicket(spec.TenantID)
	g.deadline = n.newDeadline(spec.TenantID, mod.Meta, spec.TickRate)
	g.dropped = n.metrics.dropped.WithLabelValues(spec.TenantID)
	g.tickTime = n.metrics.tickCPU.WithLabelValues(spec.TenantID)
	return g
}

// useGuestLog makes l the match's guest log: the instance's lines go there.
func (g *game) useGuestLog(l *guestLog) {
	g.glog = l
	g.inst.SetOutputSink(l.add)
}

// stop asks the actor to stop; it does not wait.
// reasonNodeStopping is the stop reason of Node.Close.
const reasonNodeStopping = "node shutting down"

func (g *game) stop(reason string) {
	select {
	case g.quit <- reason:
	default:
	}
}

// send delivers a request to the actor unless it has finished.
func (g *game) send(ctx context.Context, msg any) error {
	select {
	case g.inbox <- msg:
		return nil
	case <-g.done:
		return errGameStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the actor loop. Ticks are scheduled against the start time, not the
// previous tick, so a late tick does not shift every later one (no drift).
// When a tick is due the actor waits for a worker slot from the node's
// scheduler (fair between tenants), and records how late the tick started.
func (g *game) run() {
	defer close(g.done)
	defer g.n.count.Add(-1)
	defer g.inst.Close(context.Background())
	defer g.drawer.close()
	defer g.n.sched.unregister(g.n.ctx, g.ticket)
	g.n.sched.register(g.n.ctx, g.ticket)
	g.n.guestLogs().put(gameKey(g.spec.TenantID, g.spec.GameID), g.glog)
	ctx := context.Background()
	period := time.Second / time.Duration(g.spec.TickRate)
	clk := g.n.cfg.Clock
	start := clk.Now()
	sched := tickSchedule{start: start, startTick: g.inst.Tick(), period: period, maxLag: maxLag}
	due := start.Add(period) // when the next tick should start
	g.lastFlush = start
	g.pending.From = g.inst.Tick()
	g.pending.To = g.pending.From
	timer := clk.NewTimer(period)
	defer timer.Stop()
	for {
		select {
		case msg := <-g.inbox:
			if h, ok := msg.(handoffReq); ok {
				if g.handoff(h) {
					return
				}
				continue
			}
			g.handle(msg)
		case reason := <-g.quit:
			g.finish(ctx, clusterstate.StateFailed, reason, false)
			return
		case <-g.sess.Done():
			// Nothing more may be written: another node may own the game soon.
			g.failWaiters(errGameStopped)
			g.glog.close(StateMoved, "node lost its lease; another node resumes the game")
			g.status.publish(Status{State: StateMoved, Tick: g.inst.Tick(), Message: "node lost its lease; another node resumes the game"})
			g.n.games.Delete(gameKey(g.spec.TenantID, g.spec.GameID))
			return
		case <-timer.C():
			if g.fencedByWriter.Load() {
				g.failWaiters(errGameStopped)
				g.glog.close(StateMoved, "this node can no longer write the game's log; another node resumes it")
				g.status.publish(Status{State: StateMoved, Tick: g.inst.Tick(), Message: "this node can no longer write the game's log; another node resumes it"})
				g.n.games.Delete(gameKey(g.spec.TenantID, g.spec.GameID))
				g.n.release(g)
				return
			}
			if g.inst.Tick()-g.durableTick.Load() >= g.speculation {
				// The ticks stepped since the last flush are in no chunk yet.
				// A game catching up on a late schedule steps a burst of
				// them within one FlushInterval; when they alone reach the
				// bound, no commit can lift it and the game would wait
				// forever (tick() is what flushes). Hand them over now.
				if g.pending.To > g.pending.From {
					g.flush(false, "")
				}
				// The log is behind (etcd slow or unreachable): wait for it
				// rather than show players ticks a new owner might not replay.
				g.stalls.Add(1)
				g.n.metrics.stalled.Inc()
				timer.Reset(period / 2)
				continue
			}
			slotted := g.n.sched.acquire(g.n.ctx, g.ticket)
			began := clk.Now()
			late := began.Sub(due)
			g.n.metrics.lateness.Observe(late.Seconds())
			ended, err := g.tick(ctx, late)
			spent := clk.Now().Sub(began)
			g.tickTime.Add(spent.Seconds())
			if slotted {
				g.n.sched.release(g.n.ctx, g.ticket, spent)
			}
			if err != nil {
				cause := failCause(err)
				g.n.metrics.failed.WithLabelValues(cause).Inc()
				g.log.Error("game failed", "tick", g.inst.Tick(), "cause", cause, "err", err, "guest_output", g.inst.Output())
				g.finish(ctx, clusterstate.StateFailed, failMessage(err, g.inst.Tick(), g.spec.BuildID), false)
				return
			}
			if !ended {
				// The hard deadline counts game time, so every node that runs
				// the game (after a failover too) ends it at the same tick.
				if msg, over := g.deadline.reached(g.inst.Tick()); over {
					g.finish(ctx, clusterstate.StateEnded, msg, true)
					return
				}
			}
			if ended {
				g.finish(ctx, clusterstate.StateEnded, "match ended", true)
				return
			}
			if g.idleOver(clk.Now()) {
				g.finish(ctx, clusterstate.StateEnded, idleMessage(g.n.cfg.IdleEnd), true)
				return
			}
			var wait time.Duration
			due, wait = sched.next(g.inst.Tick(), clk.Now())
			timer.Reset(wait)
		}
	}
}

func (g *game) handle(msg any) {
	switch m := msg.(type) {
	case joinReq:
		r := g.join(m.account, m.name)
		if r.err != nil {
			m.reply <- r
			return
		}
		g.queuedAcks = append(g.queuedAcks, ackWaiter{joined: m.reply, slot: r.slot})
	case inputReq:
		g.input(m)
	case slotReq:
		s, ok := g.accounts[m.account]
		if !ok {
			s = -1
		}
		m.reply <- s
	}
}

func (g *game) join(account, name string) joinResult {
	if s, ok := g.accounts[account]; ok {
		return joinResult{slot: s}
	}
	if len(g.spec.Reserved) > 0 && !slices.Contains(g.spec.Reserved, account) {
		return joinResult{slot: -1, err: nodeErrorf(errNotMatched,
			"game %s is a matched game: only the players the matchmaker matched into it may join (find a match, or join a lobby game)", g.spec.GameID)}
	}
	for i, s := range g.slots {
		if s.account == "" {
			s.account, s.name, s.lastSeq, s.lastTick, s.joinTick = account, name, 0, 0, g.inst.Tick()
			s.ctl.join(account, g.n.cfg.Clock.Now())
			g.accounts[account] = i
			g.players++
			ev := abi.Event{Kind: abi.EventJoin, Slot: uint8(i), Payload: []byte(name)}
			g.events = append(g.events, ev)
			g.entries = append(g.entries, inputlog.Entry{Event: ev, Account: account})
			return joinResult{slot: i}
		}
	}
	return joinResult{slot: -1, err: errGameFull}
}

// dropQueued discards events not yet stepped and fails their senders, who
// re-send them (to this game's next owner, or not at all once it is over):
// an input is acknowledged only when it is in a durable chunk. Inputs held for
// a gap are failed too. It is called only when the game leaves this node, so
// the slots' lastSeq (already advanced for the dropped inputs) is never
// consulted again here; the next owner rebuilds it from the log.
func (g *game) dropQueued(err error) {
	g.events, g.entries = g.events[:0], g.entries[:0]
	for _, a := range g.queuedAcks {
		a.answer(err)
	}
	g.queuedAcks = nil
	for _, s := range g.slots {
		for seq, h := range s.held {
			h.reply <- inputResult{err: err}
			delete(s.held, seq)
		}
	}
}

// failMessage is the status message players see when their match fails
// because of its module, in the module's words when it gave some (its panic
// or error line: engine.GuestMessage); the log line carries the full error.
func failMessage(err error, tick int64, build string) string {
	var te *engine.TrapError
	if errors.As(err, &te) {
		tick = te.Tick
	}
	var what string
	switch {
	case errors.Is(err, engine.ErrDeadline):
		what = "the game module exceeded its CPU deadline"
	case te != nil && te.Message != "":
		return fmt.Sprintf("match failed: %s (build %.12s)", te.Reason(), build)
	case te != nil:
		what = fmt.Sprintf("the game module crashed (%s)", firstLine(te.Err.Error()))
	default:
		what = fmt.Sprintf("the game module failed (%s)", firstLine(err.Error()))
	}
	return fmt.Sprintf("match failed: %s at tick %d (build %.12s)", what, tick, build)
}

// firstLine cuts s at its first newline (wazero appends a wasm stack trace
// to a trap's text).
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// tick steps the game once, renders due frames and flushes the log when due. A
// tick that started more than FrameDropLateness late renders no views: the node
// sheds frames before it lets ticks slip.
func (g *game) tick(ctx context.Context, late time.Duration) (bool, error) {
	t := g.inst.Tick()
	g.expireHeld(time.Now())
	g.leaveAbandoned(g.n.cfg.Clock.Now())
	for i := range g.entries {
		g.entries[i].Tick = t
	}
	g.pending.Entries = append(g.pending.Entries, g.entries...)
	// The queued inputs are in the chunk now: their acks wait for its commit.
	g.acks = append(g.acks, g.queuedAcks...)
	g.queuedAcks = g.queuedAcks[:0]
	ended, err := g.inst.Step(ctx, g.events)
	g.events, g.entries = g.events[:0], g.entries[:0]
	if err != nil {
		// Log the failing tick too, so a replay reproduces the failure at this tick.
		g.pending.To = t + 1
		return false, err
	}
	g.pending.To = g.inst.Tick()
	g.stepped.Store(g.inst.Tick())
	if g.inst.Tick()%int64(g.n.cfg.HashEvery) == 0 || ended {
		h, err := g.inst.StateHash(ctx)
		if err != nil {
			return false, err
		}
		g.pending.Hashes = append(g.pending.Hashes, inputlog.Hash{Tick: g.inst.Tick(), Hash: h})
	}
	if !ended {
		if late > g.n.cfg.FrameDropLateness {
			if g.watched() && g.inst.Tick()%int64(g.spec.FrameDivisor) == 0 {
				g.dropped.Inc()
			}
		} else if err := g.render(ctx); err != nil {
			return false, err
		}
	}
	if g.n.cfg.Clock.Now().Sub(g.lastFlush) >= g.n.cfg.FlushInterval || g.chunkBytes >= maxChunkInputBytes/2 {
		g.flush(false, "")
		g.status.publish(Status{State: clusterstate.StateRunning, Tick: g.inst.Tick(), Players: g.players})
	}
	if !ended {
		g.maybeReportProgress(ctx)
	}
	return ended, nil
}

// watched reports whether anyone would receive a view published now.
func (g *game) watched() bool {
	if g.specView.watched() {
		return true
	}
	for _, s := range g.slots {
		if s.account != "" && s.view.watched() {
			return true
		}
	}
	return false
}

// render publishes every watched view (views.go): snapshots every tick, and
// pixels at the module's frame rate. The slots' pixel frames are spread over
// the ticks of a frame period (slot i renders on ticks where (tick+i) mod
// divisor is 0): each player still gets one frame per period, but a tick
// renders only 1/divisor of the views, which halves the longest tick of an
// 8-player arena and with it the lateness other games see.
func (g *game) render(ctx context.Context) error {
	tick := g.inst.Tick()
	div := int64(g.spec.FrameDivisor)
	for i, s := range g.slots {
		if s.account == "" || tick <= s.joinTick {
			// Empty, or the join is not stepped yet: the module does not know
			// the player, and its view of an unknown slot may show too much.
			continue
		}
		if err := g.drawer.draw(ctx, g.inst, s.view, i, tick, (tick+int64(i))%div == 0); err != nil {
			return err
		}
	}
	return g.drawer.draw(ctx, g.inst, g.specView, abi.SpectatorSlot, tick, tick%div == 0)
}

// flush hands the pending chunk to the node's log writer.
func (g *game) flush(final bool, state string) {
	g.flushTo(final, state, nil, nil)
}

// flushTo is flush that can also move ownership (handoff) and report the outcome.
func (g *game) flushTo(final bool, state string, handoff *clusterstate.Handoff, done chan error) {
	c := g.pending
	c.Ended = final && state == clusterstate.StateEnded
	g.logSeq++
	st := clusterstate.GameStatus{State: clusterstate.StateRunning, Tick: g.inst.Tick(), Players: g.players, NodeID: g.n.cfg.ID}
	if final {
		st.State = state
	}
	if handoff != nil {
		st.NodeID = handoff.To.ID
	}
	var ck *checkpoint
	if !final && handoff == nil {
		if ck = g.maybeCheckpoint(context.Background()); ck != nil {
			ck.Seq = g.logSeq
		}
	}
	g.n.writer.enqueue(&appendReq{g: g, seq: g.logSeq, chunk: c, status: st, acks: g.acks, final: final, handoff: handoff, done: done, checkpoint: ck})
	g.acks = nil
	g.pending = &inputlog.Chunk{From: c.To, To: c.To}
	g.chunkBytes = entryBytes(g.entries) // inputs of the coming tick: the next chunk's
	g.lastFlush = g.n.cfg.Clock.Now()
}

// entryBytes is what entries add to a chunk, as chunkBytes counts it.
func entryBytes(entries []inputlog.Entry) int {
	n := 0
	for _, e := range entries {
		n += len(e.Event.Payload) + inputEntryOverhead
	}
	return n
}

// finish writes the last chunk and the final status, tells every stream, and
// releases the game.
func (g *game) finish(ctx context.Context, state, message string, ended bool) {
	// Inputs queued but not stepped are not in the log: refuse them.
	for len(g.inbox) > 0 {
		switch m := (<-g.inbox).(type) {
		case inputReq:
			m.reply <- inputResult{err: errGameOver}
		case joinReq:
			m.reply <- joinResult{err: errGameOver}
		case slotReq:
			m.reply <- -1
		case handoffReq:
			m.reply <- errGameOver
		}
	}
	g.dropQueued(errGameOver)
	// The reason is settled before the final status is written: that status
	// is what the game's archive is made of (archive.go).
	var res []byte
	resOK := false
	if ended {
		message = fmt.Sprintf("%s (build %.12s)", message, g.spec.BuildID)
		var err error
		if res, err = g.inst.Result(ctx); err == nil {
			resOK = true
			// Only its tick count, and only of a result within the size
			// the report takes (report.go): decoding a module's 30 MB
			// result whole took 10 s and 2 GiB here.
			var r struct {
				Ticks int64 `json:"ticks"`
			}
			if len(res) <= maxResultBytes && json.Unmarshal(res, &r) == nil && !isDeadlineMessage(message) && !strings.HasPrefix(message, idlePrefix) {
				message = fmt.Sprintf("match ended after %d ticks (build %.12s)", r.Ticks, g.spec.BuildID)
			}
		}
	}
	message = finalMessage(message)
	// Closed before the final flush: the archive that follows it takes the log.
	g.glog.close(state, message)
	// An ended game's result is reported once this chunk is durable, by the
	// archive its commit starts (report.go).
	g.flushFinal(ctx, state, message)
	if ended {
		if resOK {
			// The result may be up to 1 MiB: the log gets its start.
			g.log.Info("match ended", "tick", g.inst.Tick(), "result", string(res[:min(len(res), maxLoggedResult)]), "result_bytes", len(res))
		}
	} else {
		g.log.Warn("match stopped", "tick", g.inst.Tick(), "state", state, "reason", message)
	}
	final := Status{State: state, Tick: g.inst.Tick(), Players: g.players, Message: message}
	if resOK && len(res) <= maxStatusResult {
		final.Result = res
	}
	g.status.publish(final)
	g.n.games.Delete(gameKey(g.spec.TenantID, g.spec.GameID))
}

func (g *game) failWaiters(err error) {
	g.dropQueued(err)
	for _, a := range g.acks {
		a.answer(err)
	}
	g.acks = nil
	for len(g.inbox) > 0 {
		switch m := (<-g.inbox).(type) {
		case inputReq:
			m.reply <- inputResult{err: err}
		case joinReq:
			m.reply <- joinResult{err: err}
		case slotReq:
			m.reply <- -1
		case handoffReq:
			m.reply <- err
		}
	}
}
