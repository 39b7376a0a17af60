package simnode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// replica serves a game's spectators on a node that does not own it: it tails
// the game's input log in etcd (a watch), replays it on its own instance and
// renders the spectator view, paced at the game's tick rate, about one flush
// interval behind the owner. Thousands of spectators cost the owner nothing,
// and a replica keeps streaming through a handoff or a failover because the
// log simply continues. Every recorded state hash is checked as it replays.
type replica struct {
	n      *Node
	key    string
	spec   clusterstate.GameSpec
	view   *feed // the spectator camera, as snapshots and as pixels
	status *cell[Status]
	done   chan struct{}

	viewers atomic.Int32
	idle    atomic.Int64 // unix nanos when viewers last dropped to zero
}

// replicaLinger is how long a replica without spectators keeps running, so a
// spectator who reconnects finds it warm.
const replicaLinger = 10 * time.Second

// spectate returns the running replica of a game, starting one if needed.
func (n *Node) spectate(ctx context.Context, tenant, game string) (*replica, error) {
	key := gameKey(tenant, game)
	n.replicasMu.Lock()
	defer n.replicasMu.Unlock()
	if r, ok := n.replicas[key]; ok {
		select {
		case <-r.done:
		default:
			return r, nil
		}
	}
	r := &replica{n: n, key: key, view: newFeed(), status: newCell(Status{State: clusterstate.StateRunning}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go r.run(tenant, game, ready)
	select {
	case err := <-ready:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		// The replica goes on starting: keep it, so that the next spectator
		// (this one retrying) finds it rather than starting another, and it
		// ends by itself after replicaLinger without viewers (or at once, if
		// it fails to start).
		n.replicas[key] = r
		return nil, ctx.Err()
	}
	n.replicas[key] = r
	return r, nil
}

func (r *replica) run(tenant, game string, ready chan<- error) {
	defer close(r.done)
	n := r.n
	// However it ends (its game over, failed, no spectators, the node
	// closing), a finished replica leaves the table: it used to stay there,
	// with its instance's last frames, for as long as the node ran. spectate
	// holds replicasMu until it has stored r, so this runs after that.
	defer func() {
		n.replicasMu.Lock()
		if n.replicas[r.key] == r {
			delete(n.replicas, r.key)
		}
		n.replicasMu.Unlock()
	}()
	log := n.log.With("tenant", tenant, "game", game, "replica", true)
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()

	// The spec and the log so far, at one revision; then watch from the next.
	l, err := n.cfg.Etcd.ReadLog(ctx, tenant, game)
	if err != nil {
		ready <- err
		return
	}
	r.spec = l.Spec
	mod, err := n.loadModule(ctx, tenant, r.spec.BuildID)
	if err != nil {
		ready <- err
		return
	}
	inst, err := mod.InstantiateWith(ctx, r.spec.Seed, n.instanceOptions(r.spec))
	if err != nil {
		ready <- err
		return
	}
	defer inst.Close(context.Background())
	if r.spec.SnapshotFormat == "" && mod.HasRenderer {
		r.spec.SnapshotFormat, r.spec.ViewWidth, r.spec.ViewHeight = mod.Meta.SnapshotFormat, mod.Meta.ViewWidth, mod.Meta.ViewHeight
	}
	drawer := &viewDrawer{mod: mod, spec: r.spec, opts: n.instanceOptions(r.spec), log: log, maxView: n.cfg.MaxViewBytes}
	defer drawer.close()
	if err := inst.Init(ctx, r.spec.Seed, r.spec.Config); err != nil {
		ready <- err
		return
	}
	pending, _, err := decodeChunks(l.Chunks)
	if err != nil {
		ready <- err
		return
	}
	ready <- nil
	r.idle.Store(time.Now().UnixNano())

	chunks := make(chan *inputlog.Chunk, 64)
	go func() {
		defer close(chunks)
		for lc := range n.cfg.Etcd.WatchLog(ctx, tenant, game, l.Revision+1) {
			c, err := inputlog.Decode(lc.Data)
			if err != nil {
				log.Error("replica: corrupt log chunk", "seq", lc.Seq, "err", err)
				continue
			}
			select {
			case chunks <- c:
			case <-ctx.Done():
				return
			}
		}
	}()

	// The game's final status, once it is finished: a game failed by its
	// owner (an operator's EndGame, a node giving it up) ends without an
	// ended chunk, and the replica ends when it has replayed the log up to
	// that status's tick. It used to go on waiting for chunks that never
	// came, its spectators watching a frozen game for as long as they stayed.
	var final *clusterstate.GameStatus
	if l.Status.Finished() {
		final = &l.Status
	}
	finals := n.cfg.Etcd.WatchFinal(ctx, tenant, game, l.Revision+1)

	period := time.Second / time.Duration(r.spec.TickRate)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	var cur *inputlog.Chunk
	entry, hash := 0, 0
	ended := false
	moduleEnded := false // the module's ludus_step said the match is over
	var events []abi.Event
	for {
		// Take every chunk that arrived.
	drain:
		for {
			select {
			case c, ok := <-chunks:
				if !ok {
					chunks = nil
					break drain
				}
				pending = append(pending, c)
			default:
				break drain
			}
		}
		select {
		case <-ctx.Done():
			return
		case st, ok := <-finals:
			if ok {
				final = &st
			}
			finals = nil
			continue
		case <-ticker.C:
		}
		if r.viewers.Load() == 0 && time.Since(time.Unix(0, r.idle.Load())) > replicaLinger {
			return // leaves n.replicas (deferred above)
		}
		// How far behind the log's end are we? Catch up without rendering when
		// more than half a second behind; otherwise play one tick per period.
		backlog := int64(0)
		if cur != nil {
			backlog += cur.To - inst.Tick()
		}
		for _, c := range pending {
			backlog += c.To - c.From
		}
		steps := 1
		if backlog > int64(r.spec.TickRate)/2 {
			steps = int(backlog) - r.spec.TickRate/4
		}
		for s := 0; s < steps; s++ {
			if cur == nil || inst.Tick() >= cur.To {
				if cur != nil && cur.Ended {
					ended = true
				}
				if len(pending) == 0 {
					break
				}
				cur, pending = pending[0], pending[1:]
				entry, hash = 0, 0
				if cur.From != inst.Tick() {
					r.fail(fmt.Sprintf("log gap: chunk starts at tick %d, replica at %d", cur.From, inst.Tick()))
					return
				}
				if cur.From == cur.To && cur.Ended {
					ended = true
				}
			}
			if inst.Tick() >= cur.To {
				continue
			}
			events = events[:0]
			for entry < len(cur.Entries) && cur.Entries[entry].Tick == inst.Tick() {
				events = append(events, cur.Entries[entry].Event)
				entry++
			}
			done, err := inst.Step(ctx, events)
			if err != nil {
				var te *engine.TrapError
				if errors.As(err, &te) {
					r.status.publish(Status{State: clusterstate.StateFailed, Tick: inst.Tick(), Message: err.Error()})
					return
				}
				r.fail(err.Error())
				return
			}
			for hash < len(cur.Hashes) && cur.Hashes[hash].Tick == inst.Tick() {
				got, err := inst.StateHash(ctx)
				if err == nil && got != cur.Hashes[hash].Hash {
					d := &DesyncError{Tick: inst.Tick(), Want: cur.Hashes[hash].Hash, Got: got, BuildID: r.spec.BuildID, GameID: r.spec.GameID}
					log.Error("replica detected a desync", "tick", inst.Tick(), "build", r.spec.BuildID, "err", d)
					r.fail(d.Error())
					return
				}
				hash++
			}
			if s == steps-1 || done {
				if err := drawer.draw(ctx, inst, r.view, abi.SpectatorSlot, inst.Tick(), inst.Tick()%int64(r.spec.FrameDivisor) == 0); err != nil {
					r.fail(err.Error())
					return
				}
			}
			if done {
				// Stepped on, an ended module no longer advances its tick:
				// the replica stalled on the same tick for good.
				moduleEnded = true
				break
			}
		}
		if moduleEnded {
			logEnd := cur.To
			for _, c := range pending {
				logEnd = max(logEnd, c.To)
			}
			if inst.Tick() < logEnd {
				d := &DesyncError{Tick: inst.Tick(), BuildID: r.spec.BuildID, GameID: r.spec.GameID, LogEnd: logEnd}
				log.Error("replica detected a desync", "tick", inst.Tick(), "build", r.spec.BuildID, "err", d)
				r.fail(d.Error())
				return
			}
			r.status.publish(Status{State: clusterstate.StateEnded, Tick: inst.Tick(), Message: "match ended"})
			return
		}
		if inst.Tick()%int64(r.spec.TickRate/4+1) == 0 {
			r.status.publish(Status{State: clusterstate.StateRunning, Tick: inst.Tick()})
		}
		if ended || (cur != nil && cur.Ended && inst.Tick() >= cur.To && len(pending) == 0) {
			r.status.publish(Status{State: clusterstate.StateEnded, Tick: inst.Tick(), Message: "match ended"})
			return
		}
		if final != nil && len(pending) == 0 && (cur == nil || inst.Tick() >= cur.To) && inst.Tick() >= final.Tick {
			r.status.publish(Status{State: final.State, Tick: inst.Tick(), Message: final.Message})
			return
		}
	}
}

func (r *replica) fail(msg string) {
	r.status.publish(Status{State: clusterstate.StateFailed, Message: "spectator replica: " + msg})
}

// viewerJoined and viewerLeft keep the replica alive while it has spectators.
func (r *replica) viewerJoined() { r.viewers.Add(1) }
func (r *replica) viewerLeft() {
	if r.viewers.Add(-1) == 0 {
		r.idle.Store(time.Now().UnixNano())
	}
}
