package simnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// claimDelay is how long the node ranked r waits before trying to claim an
// orphaned game: the first-ranked node claims at once, the others only if it
// did not (it may be dead too).
func (n *Node) claimDelay(r int) time.Duration {
	return time.Duration(r) * n.cfg.LeaseTTL / 4
}

// watchOwners reacts to owner keys: a key handed to this node (handoff) is
// adopted; a key that vanished while its game still runs (its owner's lease
// expired) is claimed by the node that ranks first. A periodic sweep catches
// what the watch missed (a compaction, a restart of the whole fleet).
func (n *Node) watchOwners() {
	defer n.wg.Done()
	sweep := time.NewTicker(2 * n.cfg.LeaseTTL)
	defer sweep.Stop()
	n.sweep()
	for n.ctx.Err() == nil {
		wch := n.cfg.Etcd.WatchOwners(n.ctx, clusterstate.OwnerWatch{RequireLeader: true})
	loop:
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-sweep.C:
				n.sweep()
			case evs, ok := <-wch:
				if !ok {
					break loop
				}
				for _, ev := range evs {
					tenant, game := ev.Tenant, ev.Game
					if ev.Deleted {
						go n.considerOrphan(tenant, game)
						continue
					}
					if ev.Node() == n.cfg.ID {
						if _, running := n.game(tenant, game); !running {
							go n.adopt(ev.Claim)
						}
					}
				}
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sweep looks for running games without an owner, and for owner keys naming
// this node that it does not run.
func (n *Node) sweep() {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
	defer cancel()
	games, rev, err := n.cfg.Etcd.ScanGames(ctx)
	if err != nil {
		return
	}
	for _, gs := range games {
		tenant, game := gs.Tenant, gs.Game
		if gs.Status.Finished() {
			// A finished game whose log is still in etcd (its node died before
			// archiving it): the node ranked first archives it.
			if !gs.Owned && gs.StatusRevision < rev-1 {
				go n.archiveIfFirst(tenant, game)
			}
			continue
		}
		if gs.Status.State != clusterstate.StateRunning {
			continue
		}
		if !gs.Owned {
			go n.considerOrphan(tenant, game)
			continue
		}
		if gs.Owner.Node() == n.cfg.ID {
			if _, running := n.game(tenant, game); !running {
				go n.adopt(gs.Owner.Claim)
			}
		}
	}
}

// considerOrphan claims a running game that lost its owner, if this node ranks
// first among the live nodes — or if the nodes ranked above it did not claim it
// in time.
func (n *Node) considerOrphan(tenant, game string) {
	if n.draining.Load() || n.sess.Load().Fenced() {
		return
	}
	key := gameKey(tenant, game)
	if _, busy := n.resuming.LoadOrStore(key, true); busy {
		return
	}
	claimed := false
	defer func() {
		if !claimed {
			n.resuming.Delete(key)
		}
	}()
	ctx, cancel := context.WithTimeout(n.ctx, 4*n.cfg.LeaseTTL)
	defer cancel()
	view := n.cfg.Etcd.View()
	g, err := view.Game(ctx, tenant, game)
	if err != nil || g.Status.State != clusterstate.StateRunning || g.Owner != "" {
		return
	}
	nodes, err := view.Nodes(ctx)
	if err != nil {
		return
	}
	r := -1
	// Every node ranks the same way (the game's region first), so the claim
	// delays agree on who goes first.
	for i, cand := range fleet.Rank(nodes, game, fleet.RankOptions{Region: g.Spec.Region}) {
		if cand.ID == n.cfg.ID {
			r = i
		}
	}
	if r < 0 {
		return // this node cannot take it (full, draining, not registered yet)
	}
	select {
	case <-time.After(n.claimDelay(r)):
	case <-ctx.Done():
		return
	}
	sess := n.sess.Load()
	if sess.Fenced() || int(n.count.Load()) >= n.cfg.Capacity {
		return
	}
	c, err := n.cfg.Etcd.ClaimOrphan(ctx, sess, tenant, game, n.cfg.ID)
	if err != nil {
		return
	}
	n.log.Info("claimed an orphaned game", "tenant", tenant, "game", game, "rank", r)
	claimed = true
	n.resuming.Delete(key)
	n.adopt(c)
}

// adopt resumes a game whose owner key names this node: replay its log from
// the seed (checking every recorded state hash) and start its actor at the
// tick after the log's end.
func (n *Node) adopt(c clusterstate.Claim) {
	tenant, game := c.Tenant, c.Game
	key := gameKey(tenant, game)
	if _, running := n.game(tenant, game); running {
		return
	}
	if _, busy := n.resuming.LoadOrStore(key+"#adopt", true); busy {
		return
	}
	defer n.resuming.Delete(key + "#adopt")
	if n.draining.Load() {
		// A draining node starts no game: one it resumed after its drain
		// had found it empty (the node fenced meanwhile, its games
		// stopped, and its sweep found their claims naming it) was failed
		// by the Close that followed ("node shutting down"). Released, the
		// game is taken over by a node that stays.
		n.log.Info("draining: releasing a game rather than resuming it here", "tenant", tenant, "game", game)
		n.giveUp(c)
		return
	}
	n.resuming.Store(key, true)
	defer n.resuming.Delete(key)
	start := time.Now()
	log := n.log.With("tenant", tenant, "game", game)
	sess := n.sess.Load()
	// From here on this node holds the claim: every way out that does not
	// start the game releases it (giveUp) or fails the game (failGame), each
	// on a fresh context, so that a resume that ran out of time does not
	// leave the game owned by a node that does not run it.
	rctx, rcancel := context.WithTimeout(n.ctx, resumeBase)
	spec, chunks, seqs, err := readLog(rctx, n.cfg.Etcd, tenant, game)
	rcancel()
	if err != nil {
		log.Error("cannot read the log of a game to resume", "err", err)
		n.giveUp(c)
		return
	}
	logEnd := int64(0)
	if len(chunks) > 0 {
		logEnd = chunks[len(chunks)-1].To
	}
	log = log.With("build", spec.BuildID, "tick", logEnd)
	budget := n.resumeBudget(logEnd, spec.TickRate)
	ctx, cancel := context.WithDeadline(n.ctx, start.Add(budget))
	defer cancel()
	mod, err := n.loadModule(ctx, tenant, spec.BuildID)
	if err != nil {
		if moduleGone(err) {
			// No node can run it: fail the game rather than pass it around.
			log.Error("the module of a game to resume is missing or unusable; the game fails", "err", err)
			n.failGame(c, logEnd, resumeFailMessage(n.cfg.ID, fmt.Errorf("module build %.12s: %w", spec.BuildID, err)))
			return
		}
		log.Error("cannot load the module of a game to resume", "err", err)
		n.giveUp(c)
		return
	}
	var ck *checkpoint
	if mod.HasCheckpoint && len(seqs) > 0 {
		if b, err := n.cfg.Etcd.Checkpoint(ctx, tenant, game); err == nil && b != nil {
			if c, err := decodeCheckpoint(b); err == nil && c.Seq <= seqs[len(seqs)-1] {
				ck = c
			}
		}
	}
	inst, hashes, fromCk, err := replayFrom(ctx, mod, spec, chunks, seqs, ck, n.instanceOptions(spec), log)
	if err != nil && ctx.Err() != nil {
		// Out of time, or the node is closing: nothing says the game cannot
		// be rebuilt, so another node (or this one, on a later sweep) tries.
		log.Error("the resume ran out of time; releasing the game", "budget", budget, "err", err)
		n.giveUpUnlessFenced(c, sess)
		return
	}
	if de := (*DesyncError)(nil); errors.As(err, &de) {
		// Counted in ludus_desyncs_total by ReplayModule.
		log.Error("desync on resume: the game cannot resume", "tick", de.Tick, "err", err)
	} else if err != nil {
		log.Error("replay failed; the game cannot resume", "err", err)
	}
	if err != nil {
		n.failGame(c, logEnd, resumeFailMessage(n.cfg.ID, err))
		return
	}
	// The replay is done: what is left is quick, and must not fail only
	// because the replay used up the budget.
	fctx, fcancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer fcancel()
	// The owner key must still be ours: someone may have taken it meanwhile.
	o, err := n.cfg.Etcd.Owner(fctx, tenant, game)
	if err != nil || o.Owner != c.Owner || sess.Fenced() {
		inst.Close(fctx)
		if err != nil {
			n.giveUpUnlessFenced(c, sess)
		}
		return
	}
	c = o.Claim
	if !sess.Holds(o) {
		// A claim of this node's previous lease (it was fenced, e.g. during an
		// etcd outage, and registered again): that lease is no longer renewed
		// and will expire, and with it the claim. Resuming under it would move
		// the game a second time; re-claim it under the current lease first.
		if c, err = n.reclaim(fctx, c, sess); err != nil {
			log.Warn("cannot re-claim a game of this node's previous lease; another node will take it", "err", err)
			inst.Close(fctx)
			return
		}
	}
	if n.draining.Load() {
		// The drain began during the replay (see above).
		inst.Close(fctx)
		n.giveUp(c)
		return
	}
	g := newGame(n, sess, spec, mod, inst, c)
	g.hasCheckpoint = mod.HasCheckpoint
	g.lastCheckpoint = inst.Tick()
	if fromCk {
		n.fromCheckpoint.Add(1)
	}
	g.restore(chunks)
	if len(seqs) > 0 {
		g.logSeq = seqs[len(seqs)-1]
	}
	if _, dup := n.games.LoadOrStore(key, g); dup {
		inst.Close(fctx)
		return
	}
	n.count.Add(1)
	tick := inst.Tick() // the actor owns inst once it runs
	go g.run()
	log.Info("game resumed", "tick", tick, "chunks", len(chunks), "hashes_checked", len(hashes), "from_checkpoint", fromCk,
		"resume_ms", time.Since(start).Milliseconds(), "build", spec.BuildID)
}

// resumeBase is what a resume may take besides replaying the log's ticks:
// reading the log, loading the module, restoring a checkpoint.
const resumeBase = 30 * time.Second

// defaultResumeBudget bounds one resume of a log of ticks at tickRate:
// resumeBase plus the log's span in game time. A node replays much faster
// than the game ran (no frames, no waiting for ticks), so a replay slower
// than that means this node could not run the game either. A fixed budget
// instead made a long game's log impossible to replay in time: every node
// claimed it, replayed, ran out of time and (before it released the claim)
// stranded it.
func defaultResumeBudget(ticks int64, tickRate int) time.Duration {
	if tickRate <= 0 || ticks <= 0 {
		return resumeBase
	}
	return resumeBase + time.Duration(ticks)*time.Second/time.Duration(tickRate)
}

// reclaim moves a claim of an older lease of this node to the current lease,
// under a new claim id, fenced on the old claim: if the old claim is gone (its
// lease expired and another node claimed the game) nothing changes.
func (n *Node) reclaim(ctx context.Context, c clusterstate.Claim, sess *clusterstate.Session) (clusterstate.Claim, error) {
	next, err := n.cfg.Etcd.Reclaim(ctx, sess, c)
	if err != nil {
		return c, err
	}
	n.reclaims.Add(1)
	return next, nil
}

// giveUp releases a claim this node cannot honour, so another node tries.
func (n *Node) giveUp(c clusterstate.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer cancel()
	_ = n.cfg.Etcd.Release(ctx, c)
}

// giveUpUnlessFenced releases a claim a resume could not honour, unless
// the session it was made under is fenced: such a claim is kept for this
// node to re-claim under its next session (the sweep finds it naming this
// node and adopts it again, see reclaim), so the game does not move.
func (n *Node) giveUpUnlessFenced(c clusterstate.Claim, sess *clusterstate.Session) {
	if !sess.Fenced() {
		n.giveUp(c)
	}
}

// failGame marks a game that cannot be rebuilt (a desync, it crashed on its
// last tick, its module is gone) as failed at tick (its log's end) and
// releases it, fenced by the claim. The message is what players, the
// operator who moved the game (fleet's HandoffGame) and the archive see.
//
// It takes a fresh context, not the resume's: a resume that used up its
// budget must still be able to say so.
func (n *Node) failGame(c clusterstate.Claim, tick int64, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer cancel()
	_ = n.cfg.Etcd.Fail(ctx, c, clusterstate.GameStatus{State: clusterstate.StateFailed, Tick: tick, NodeID: n.cfg.ID, Message: finalMessage(msg)})
}

// resumeFailMessage says why node could not resume a game, in the module's
// words for a trap and with the likely causes for a desync.
func resumeFailMessage(node string, err error) string {
	why := firstLine(err.Error())
	var te *engine.TrapError
	var de *DesyncError
	switch {
	case errors.As(err, &de):
		why = de.Error()
	case errors.As(err, &te):
		why = te.Reason()
	}
	return fmt.Sprintf("match failed: node %s could not resume it: %s", node, why)
}

// moduleGone reports whether a module load failed for good: the store does
// not have the build, or it is not a usable module. Other failures (the
// store unreachable) may pass; another node, or a later try, may succeed.
func moduleGone(err error) bool {
	return connect.CodeOf(err) == connect.CodeNotFound || errors.Is(err, errModuleUnusable) || errors.Is(err, errModuleMismatch)
}

// restore rebuilds the host's view of the slots (which account holds which
// slot, each slot's last input sequence) from the log, so re-sent inputs are
// recognised after a move.
func (g *game) restore(chunks []*inputlog.Chunk) {
	for _, c := range chunks {
		for _, e := range c.Entries {
			i := int(e.Event.Slot)
			if i >= len(g.slots) {
				continue
			}
			s := g.slots[i]
			switch e.Event.Kind {
			case 1: // join
				if s.account == "" && e.Account != "" {
					s.account, s.name, s.lastSeq, s.lastTick, s.joinTick = e.Account, string(e.Event.Payload), 0, 0, e.Tick
					s.ctl.join(e.Account, g.n.cfg.Clock.Now())
					g.accounts[e.Account] = i
					g.players++
				}
			case 2: // leave
				if s.account != "" {
					delete(g.accounts, s.account)
					s.account, s.name = "", ""
					s.ctl.leave()
					g.players--
				}
			case 3: // input
				if e.Seq > s.lastSeq {
					s.lastSeq, s.lastTick = e.Seq, e.Tick
				}
				// The log's inputs count against the budget as they did on
				// the node that logged them (inputs.go).
				s.logged += len(e.Event.Payload) + inputEntryOverhead
				g.logged += len(e.Event.Payload) + inputEntryOverhead
			}
		}
	}
}

// archiveIfFirst archives a finished game if this node ranks first for it.
func (n *Node) archiveIfFirst(tenant, game string) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
	nodes, err := n.cfg.Etcd.View().Nodes(ctx)
	cancel()
	if err != nil {
		return
	}
	if r := fleet.Rank(nodes, game, fleet.RankOptions{}); len(r) > 0 && r[0].ID == n.cfg.ID {
		n.archive(tenant, game)
	}
}
