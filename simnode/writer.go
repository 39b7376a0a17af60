package simnode

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/simnode/inputlog"
)

// appendReq is one game's chunk waiting to be made durable.
type appendReq struct {
	g      *game
	seq    uint64
	chunk  *inputlog.Chunk
	status clusterstate.GameStatus
	acks   []ackWaiter
	final  bool
	// handoff, if set, moves the owner key to another node in the same
	// transaction as the final chunk.
	handoff *clusterstate.Handoff
	// done, if set, learns whether the append committed.
	done chan error
	// checkpoint, if set, is written with the chunk (it ends where the chunk ends).
	checkpoint *checkpoint
	// encoded is the request as a clusterstate append, made once (append).
	encoded *clusterstate.Append
}

// logWriter group-commits the input logs of all the node's games: it takes every
// chunk queued since its last round trip and writes them in as few etcd
// transactions as the per-transaction operation limit allows
// (clusterstate.AppendAll). Each game's puts are guarded by a compare on that
// game's owner key (value and create revision), so a node that lost a game can
// never append to its log.
type logWriter struct {
	n     *Node
	queue chan *appendReq
	// hold, if set (tests only), is called before each transaction: a test
	// holds the log back as a slow etcd would.
	hold atomic.Pointer[func()]
}

// gamesPerTxn keeps a transaction within etcd's operation limit.
const gamesPerTxn = clusterstate.MaxAppendsPerTxn

func newLogWriter(n *Node) *logWriter {
	return &logWriter{n: n, queue: make(chan *appendReq, 4096)}
}

func (w *logWriter) enqueue(r *appendReq) {
	w.queue <- r
}

func (w *logWriter) run() {
	defer w.n.wg.Done()
	for {
		var batch []*appendReq
		select {
		case r := <-w.queue:
			batch = append(batch, r)
		case <-w.n.ctx.Done():
			w.drain()
			return
		}
	collect:
		for {
			select {
			case r := <-w.queue:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		w.commit(batch)
	}
}

// drain commits what is queued at shutdown, with a short deadline.
func (w *logWriter) drain() {
	for {
		select {
		case r := <-w.queue:
			w.commit([]*appendReq{r})
		default:
			return
		}
	}
}

func (w *logWriter) commit(batch []*appendReq) {
	for len(batch) > 0 {
		now, later := nextGroup(batch)
		w.commitGroup(now)
		batch = later
	}
}

// nextGroup picks the appends of batch that go in one transaction: at most
// one per game (a game's chunks must commit in order, so the rest wait for
// the next round), at most gamesPerTxn, and within
// clusterstate.MaxAppendBytesPerTxn (a lone append that is larger goes
// alone). The others are returned, in order, as later.
func nextGroup(batch []*appendReq) (now, later []*appendReq) {
	seen := map[*game]bool{}
	bytes := 0
	for _, r := range batch {
		size := r.append().Size()
		if seen[r.g] || len(now) == gamesPerTxn || (len(now) > 0 && bytes+size > clusterstate.MaxAppendBytesPerTxn) {
			later = append(later, r)
			continue
		}
		seen[r.g] = true
		bytes += size
		now = append(now, r)
	}
	return now, later
}

func (w *logWriter) commitGroup(group []*appendReq) {
	if h := w.hold.Load(); h != nil {
		(*h)()
	}
	live := group[:0:0]
	for _, r := range group {
		if r.g.sess.Fenced() {
			w.fail([]*appendReq{r}, errGameStopped)
		} else if r.g.fencedByWriter.Load() {
			w.failAfterGap(r)
		} else {
			live = append(live, r)
		}
	}
	group = live
	if len(group) == 0 {
		return
	}
	appends := make([]clusterstate.Append, len(group))
	for i, r := range group {
		appends[i] = *r.append()
	}
	// Not n.ctx: at shutdown the last chunks must still be written.
	ctx, cancel := context.WithTimeout(context.Background(), w.n.cfg.LeaseTTL)
	err := w.n.cfg.Etcd.AppendAll(ctx, appends)
	cancel()
	if err == nil {
		w.succeed(group)
		return
	}
	if !errors.Is(err, clusterstate.ErrClaimLost) && len(group) == 1 {
		w.retryOne(group[0])
		return
	}
	// Some game in the group lost its owner key (or the round trip failed): commit
	// one by one to find out which.
	for _, r := range group {
		w.retryOne(r)
	}
}

func (w *logWriter) retryOne(r *appendReq) {
	for attempt := 0; ; attempt++ {
		if r.g.sess.Fenced() {
			w.fail([]*appendReq{r}, errGameStopped)
			return
		}
		if r.g.fencedByWriter.Load() {
			w.failAfterGap(r)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.n.cfg.LeaseTTL)
		err := w.n.cfg.Etcd.Append(ctx, *r.append())
		cancel()
		switch {
		case err == nil:
			w.succeed([]*appendReq{r})
			return
		case errors.Is(err, clusterstate.ErrClaimLost):
			r.g.log.Error("input log append refused: this node no longer owns the game", "chunk", r.seq)
			w.failForGood(r)
			return
		case w.n.ctx.Err() != nil || attempt >= 5:
			r.g.log.Error("input log append failed", "chunk", r.seq, "err", err)
			w.failForGood(r)
			return
		}
		time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
	}
}

// append is the request as a clusterstate append, fenced by the game's
// claim (encoded once: a round may size it, commit it and retry it).
func (r *appendReq) append() *clusterstate.Append {
	if r.encoded != nil {
		return r.encoded
	}
	a := &clusterstate.Append{Claim: r.g.claim, Seq: r.seq, Chunk: inputlog.Encode(nil, r.chunk),
		Status: r.status, Final: r.final, Handoff: r.handoff}
	if r.checkpoint != nil {
		a.Checkpoint = r.checkpoint.encode()
	}
	r.encoded = a
	return a
}

func (w *logWriter) succeed(group []*appendReq) {
	for _, r := range group {
		// Metered per tenant (usage.go): one committed append, whether it
		// shared its transaction with other games' or not.
		w.n.sched.usage.tenant(r.g.spec.TenantID).addEtcdWrite()
		r.g.durableTick.Store(r.chunk.To)
		if r.final && r.handoff == nil {
			go w.n.archive(r.g.spec.TenantID, r.g.spec.GameID)
		}
		if r.done != nil {
			r.done <- nil
		}
		for _, a := range r.acks {
			a.answer(nil)
		}
	}
}

// failForGood gives up on r: its game's log ends before r's chunk for good.
// fencedByWriter stops the actor at its next tick and releases the claim
// (game.run), so another node resumes the game from the durable log; it
// also makes every later append of the game fail (failAfterGap), since
// committing one would leave a gap in the log that no node can resume from,
// and acknowledge inputs that no resume replays.
func (w *logWriter) failForGood(r *appendReq) {
	r.g.fencedByWriter.Store(true)
	w.fail([]*appendReq{r}, errGameStopped)
	w.releaseIfFinal(r)
}

// failAfterGap refuses an append queued behind one of the same game that
// failed for good: chunks commit in order or not at all.
func (w *logWriter) failAfterGap(r *appendReq) {
	r.g.log.Warn("input log append dropped: an earlier chunk of the game failed", "chunk", r.seq)
	w.fail([]*appendReq{r}, errGameStopped)
	w.releaseIfFinal(r)
}

// releaseIfFinal releases the claim of a game whose final chunk failed. Its
// actor has already returned (finish does not wait for the commit), so the
// fencedByWriter path in game.run never runs; without this the owner key,
// bound to this live node's lease, would keep every other node from
// resuming the game. Release is fenced by the claim: a lost claim is left
// alone.
func (w *logWriter) releaseIfFinal(r *appendReq) {
	if r.final {
		w.n.release(r.g)
	}
}

func (w *logWriter) fail(group []*appendReq, err error) {
	for _, r := range group {
		if r.done != nil {
			r.done <- err
		}
		for _, a := range r.acks {
			a.answer(err)
		}
	}
}
