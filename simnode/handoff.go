package simnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/ops/fleet"
)

// Handoff moves a running game to another node: the actor stops between two
// ticks, and one transaction writes the log's tail and gives the owner key to the
// target (bound to the target's lease). The target sees the owner key change
// to its name, replays the log and resumes at the next tick. If target is empty,
// the node picks one by rendezvous hashing weighted by free capacity.
func (n *Node) Handoff(ctx context.Context, tenant, gameID, target string) (string, error) {
	to, _, err := n.handoffAt(ctx, tenant, gameID, target)
	return to, err
}

// handoffAt is Handoff that also returns the tick at which the game moved.
func (n *Node) handoffAt(ctx context.Context, tenant, gameID, target string) (string, int64, error) {
	g, ok := n.game(tenant, gameID)
	if !ok {
		return "", 0, nodeErrorf(errNotHere, "game %q is not running on node %s", gameID, n.cfg.ID)
	}
	nodes, err := n.cfg.Etcd.View().Nodes(ctx)
	if err != nil {
		return "", 0, nodeErrorf(errClusterState, "the fleet cannot be read: %v", err)
	}
	var to *clusterstate.NodeInfo
	if target == "" {
		// Nodes of this node's region first (its players' round trips),
		// the others only if none of them can take the game.
		ranked := fleet.Rank(nodes, gameID, fleet.RankOptions{Exclude: n.cfg.ID, Region: n.cfg.Region})
		if len(ranked) > 0 {
			to = &ranked[0]
		}
	} else {
		for i := range nodes {
			if nodes[i].ID == target {
				to = &nodes[i]
			}
		}
		if to == nil {
			return "", 0, nodeErrorf(errNoSuchNode, "no node %q in the fleet", target)
		}
		if to.ID == n.cfg.ID {
			return "", 0, nodeErrorf(errSameNode, "the game already runs on that node")
		}
		if to.Draining || to.Games >= to.Capacity {
			return "", 0, nodeErrorf(errNoRoom, "node %s takes no new games (draining or full)", to.ID)
		}
	}
	if to == nil {
		return "", 0, nodeErrorf(errNoRoom, "no other node has room for the game")
	}
	reply, at := make(chan error, 1), new(int64)
	if err := g.send(ctx, handoffReq{target: *to, reply: reply, at: at}); err != nil {
		return "", 0, err
	}
	select {
	case err := <-reply:
		if err != nil {
			return "", 0, err
		}
		return to.ID, *at, nil
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
}

// handoff runs on the actor: write the tail and move the owner key. It reports
// whether the actor must stop (it must once ownership may have moved).
func (g *game) handoff(h handoffReq) bool {
	start := time.Now()
	// Events queued for the next tick are not in the log; their senders retry on
	// the new owner (inputs are acknowledged only once durable).
	g.dropQueued(errGameStopped)
	done := make(chan error, 1)
	g.flushTo(false, "", clusterstate.NewHandoff(h.target), done)
	err := <-done
	if err != nil {
		h.reply <- err
		g.fencedByWriter.Store(true) // the next tick stops the game and releases it
		return false
	}
	g.failWaiters(errGameStopped)
	moved := fmt.Sprintf("moved to node %s at tick %d", h.target.ID, g.inst.Tick())
	g.glog.close(StateMoved, moved)
	g.status.publish(Status{State: StateMoved, Tick: g.inst.Tick(), Players: g.players, Message: moved})
	g.n.games.Delete(gameKey(g.spec.TenantID, g.spec.GameID))
	g.log.Info("game handed off", "tick", g.inst.Tick(), "to", h.target.ID, "ms", time.Since(start).Milliseconds())
	*h.at = g.inst.Tick()
	h.reply <- nil
	return true
}

// release gives up a game this node can no longer run, if the owner key is
// still this claim's, so that a live node takes it over from its log.
func (n *Node) release(g *game) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer cancel()
	_ = n.cfg.Etcd.Release(ctx, g.claim)
}

// Drain stops new placements on the node and hands every game to other nodes.
// It returns when the node runs no game or ctx ends.
func (n *Node) Drain(ctx context.Context) error {
	if n.draining.CompareAndSwap(false, true) {
		n.log.Info("draining: handing every game to other nodes")
		// A failed publish (etcd's leader changing, say) must not stop the
		// drain: the node refuses new games itself, and the heartbeat
		// publishes the flag once etcd answers. Returning here ended a
		// SIGTERM drain with every game failed, and an operator's drain for
		// good (its watch fires once).
		if err := n.publishNode(ctx, n.sess.Load()); err != nil {
			n.log.Warn("draining: the node record could not be updated yet; the heartbeat will", "err", err)
		}
	}
	for {
		var ids [][2]string
		n.games.Range(func(_, v any) bool {
			g := v.(*game)
			ids = append(ids, [2]string{g.spec.TenantID, g.spec.GameID})
			return true
		})
		if len(ids) == 0 && n.count.Load() == 0 {
			n.log.Info("drained: no games left")
			return nil
		}
		for _, id := range ids {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := n.Handoff(hctx, id[0], id[1], ""); err != nil && !errors.Is(err, errNotHere) {
				n.log.Warn("drain: handoff failed; will retry", "tenant", id[0], "game", id[1], "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Draining reports whether the node was asked to drain.
func (n *Node) Draining() bool { return n.draining.Load() }

// watchDrain drains the node when an operator sets its drain key
// (`ludus ctl node drain NODE`), then reports it drained via Drained.
func (n *Node) watchDrain() {
	defer n.wg.Done()
	if n.cfg.Etcd.AwaitDrain(n.ctx, n.cfg.ID) == nil {
		n.runDrain()
	}
}

func (n *Node) runDrain() {
	if err := n.Drain(n.ctx); err != nil {
		n.log.Warn("drain interrupted", "err", err)
		return
	}
	// The request is done: a node restarted under this id must not drain again.
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
	if err := n.cfg.Etcd.ClearDrain(ctx, n.cfg.ID); err != nil {
		n.log.Warn("drained, but the drain request could not be cleared; delete it before reusing this node id", "key", clusterstate.DrainKey(n.cfg.ID), "err", err)
	}
	cancel()
	n.drainedOnce.Do(func() { close(n.drained) })
}

// Drained is closed when a drain requested through etcd has finished; the
// `ludus simnode` process exits then.
func (n *Node) Drained() <-chan struct{} { return n.drained }

// control implements clusterv1connect.NodeControlServiceHandler.
type control struct{ n *Node }

// EndGame ends a game this node runs now, as failed with the operator's
// reason, and returns once its final status is written.
func (c *control) EndGame(ctx context.Context, req *connect.Request[clusterv1.EndGameRequest]) (*connect.Response[clusterv1.EndGameResponse], error) {
	g, ok := c.n.game(req.Msg.TenantId, req.Msg.GameId)
	if !ok {
		return nil, connectError(nodeErrorf(errNotHere, "game %q is not running on node %s", req.Msg.GameId, c.n.cfg.ID))
	}
	g.stop("ended by an operator: " + req.Msg.Reason)
	select {
	case <-g.done:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("game %s did not end in time", req.Msg.GameId))
	}
	return connect.NewResponse(&clusterv1.EndGameResponse{Tick: g.status.load().v.Tick}), nil
}

func (c *control) HandoffGame(ctx context.Context, req *connect.Request[clusterv1.HandoffGameRequest]) (*connect.Response[clusterv1.HandoffGameResponse], error) {
	to, tick, err := c.n.handoffAt(ctx, req.Msg.TenantId, req.Msg.GameId, req.Msg.TargetNodeId)
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&clusterv1.HandoffGameResponse{ToNodeId: to, Tick: tick}), nil
}
