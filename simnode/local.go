package simnode

import (
	"context"
	"errors"

	"ludus.dev/ludus/clusterstate"
)

// In-process access to a node's games, for embedders and benchmarks (`ludus
// bench capacity`): the same actor messages NodeService sends, without a
// network hop.

// Join seats account in a running game, as NodeService.JoinGame does, and
// returns its slot.
func (n *Node) Join(ctx context.Context, tenant, gameID, account, name string) (int, error) {
	g, ok := n.game(tenant, gameID)
	if !ok {
		return -1, errGameStopped
	}
	reply := make(chan joinResult, 1)
	if err := g.send(ctx, joinReq{account: account, name: name, reply: reply}); err != nil {
		return -1, err
	}
	select {
	case r := <-reply:
		return r.slot, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Input sends one input of account, as NodeService.SendInput does; it returns
// once the input is durable in the game's log.
func (n *Node) Input(ctx context.Context, tenant, gameID, account string, seq uint64, payload []byte) error {
	g, ok := n.game(tenant, gameID)
	if !ok {
		return errGameStopped
	}
	reply := make(chan inputResult, 1)
	if err := g.send(ctx, inputReq{account: account, seq: seq, payload: append([]byte(nil), payload...), reply: reply}); err != nil {
		return err
	}
	select {
	case r := <-reply:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watch watches account's view (the spectator view if account is "") and calls
// fn with every frame it finds published, until ctx ends or the game stops. A
// slow fn sees fewer frames; it never delays the game.
func (n *Node) Watch(ctx context.Context, tenant, gameID, account string, fn func(Frame)) error {
	return n.WatchMode(ctx, tenant, gameID, account, false, fn)
}

// WatchMode is Watch for either delivery: snapshots (every tick; the module
// must have a renderer) or pixels.
func (n *Node) WatchMode(ctx context.Context, tenant, gameID, account string, snapshots bool, fn func(Frame)) error {
	g, ok := n.game(tenant, gameID)
	if !ok {
		return errGameStopped
	}
	if snapshots && g.spec.SnapshotFormat == "" {
		return errNoRenderer
	}
	view := g.specView
	var replaced <-chan struct{}
	if account != "" {
		// A watcher is a stream of the player: it controls the slot (control.go).
		slot, ctl, err := g.attachPlayer(ctx, account, "")
		if err != nil {
			return err
		}
		defer g.detachPlayer(slot, ctl)
		view, replaced = g.slots[slot].view, ctl.ended
	}
	frames, counter := view.stream(snapshots)
	counter.Add(1)
	defer counter.Add(-1)
	var last uint64
	for {
		v := frames.load()
		if v.seq > last && v.v.View != nil {
			last = v.seq
			fn(v.v)
		}
		select {
		case <-v.next:
		case <-ctx.Done():
			return nil
		case <-replaced:
			return errReplaced
		case <-g.done:
			if st := g.status.load().v; st.State != clusterstate.StateRunning {
				return errors.New(st.Message)
			}
			return errGameStopped
		}
	}
}
