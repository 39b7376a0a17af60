package simnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/ops/fleet"
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
		wch := n.cfg.Etcd.Watch(clientv3.WithRequireLeader(n.ctx), fleet.OwnersPrefix(), clientv3.WithPrefix())
	loop:
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-sweep.C:
				n.sweep()
			case resp, ok := <-wch:
				if !ok || resp.Err() != nil {
					break loop
				}
				for _, ev := range resp.Events {
					tenant, game, ok := splitOwnerKey(string(ev.Kv.Key))
					if !ok {
						continue
					}
					switch ev.Type {
					case mvccpb.PUT:
						node, _ := fleet.ParseOwner(string(ev.Kv.Value))
						if node == n.cfg.ID {
							if _, running := n.game(tenant, game); !running {
								go n.adopt(tenant, game, string(ev.Kv.Value), ev.Kv.CreateRevision)
							}
						}
					case mvccpb.DELETE:
						go n.considerOrphan(tenant, game)
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

func splitOwnerKey(k string) (tenant, game string, ok bool) {
	rest, ok := strings.CutPrefix(k, fleet.OwnersPrefix())
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// sweep looks for running games without an owner, and for owner keys naming
// this node that it does not run.
func (n *Node) sweep() {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
	defer cancel()
	resp, err := n.cfg.Etcd.Txn(ctx).Then(
		clientv3.OpGet(fleet.Prefix+"status/", clientv3.WithPrefix()),
		clientv3.OpGet(fleet.OwnersPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return
	}
	owners := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if t, g, ok := splitOwnerKey(string(kv.Key)); ok {
			owners[t+"/"+g] = kv
		}
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		rest := strings.TrimPrefix(string(kv.Key), fleet.Prefix+"status/")
		tenant, game, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		var st fleet.GameStatus
		if json.Unmarshal(kv.Value, &st) != nil {
			continue
		}
		if st.State == fleet.StateEnded || st.State == fleet.StateFailed {
			// A finished game whose log is still in etcd (its node died before
			// archiving it): the node ranked first archives it.
			if _, owned := owners[tenant+"/"+game]; !owned && kv.ModRevision < resp.Header.Revision-1 {
				go n.archiveIfFirst(tenant, game)
			}
			continue
		}
		if st.State != fleet.StateRunning {
			continue
		}
		okv, owned := owners[tenant+"/"+game]
		if !owned {
			go n.considerOrphan(tenant, game)
			continue
		}
		if node, _ := fleet.ParseOwner(string(okv.Value)); node == n.cfg.ID {
			if _, running := n.game(tenant, game); !running {
				go n.adopt(tenant, game, string(okv.Value), okv.CreateRevision)
			}
		}
	}
}

// considerOrphan claims a running game that lost its owner, if this node ranks
// first among the live nodes — or if the nodes ranked above it did not claim it
// in time.
func (n *Node) considerOrphan(tenant, game string) {
	if n.draining.Load() || n.sess.Load().isFenced() {
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
	view := &fleet.View{Client: n.cfg.Etcd}
	g, err := view.Game(ctx, tenant, game)
	if err != nil || g.Status.State != fleet.StateRunning || g.Owner != "" {
		return
	}
	nodes, err := view.Nodes(ctx)
	if err != nil {
		return
	}
	r := -1
	for i, cand := range fleet.Rank(nodes, game, fleet.RankOptions{}) {
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
	if sess.isFenced() || int(n.count.Load()) >= n.cfg.Capacity {
		return
	}
	owner := fleet.OwnerValue(n.cfg.ID, newClaimID())
	k := fleet.OwnerKey(tenant, game)
	resp, err := n.cfg.Etcd.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(fleet.GameKey(tenant, game)), ">", 0),
	).Then(clientv3.OpPut(k, owner, clientv3.WithLease(sess.lease))).Commit()
	if err != nil || !resp.Succeeded {
		return
	}
	n.log.Info("claimed an orphaned game", "tenant", tenant, "game", game, "rank", r)
	claimed = true
	n.resuming.Delete(key)
	n.adopt(tenant, game, owner, resp.Header.Revision)
}

// adopt resumes a game whose owner key names this node: replay its log from
// the seed (checking every recorded state hash) and start its actor at the
// tick after the log's end.
func (n *Node) adopt(tenant, game, owner string, fence int64) {
	key := gameKey(tenant, game)
	if _, running := n.game(tenant, game); running {
		return
	}
	if _, busy := n.resuming.LoadOrStore(key+"#adopt", true); busy {
		return
	}
	defer n.resuming.Delete(key + "#adopt")
	n.resuming.Store(key, true)
	defer n.resuming.Delete(key)
	start := time.Now()
	log := n.log.With("tenant", tenant, "game", game)
	sess := n.sess.Load()
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	spec, chunks, seqs, err := readLogWithSeqs(ctx, n.cfg.Etcd, tenant, game)
	if err != nil {
		log.Error("cannot read the log of a game to resume", "err", err)
		n.giveUp(tenant, game, owner)
		return
	}
	mod, err := n.loadModule(ctx, tenant, spec.BuildID)
	if err != nil {
		log.Error("cannot load the module of a game to resume", "build", spec.BuildID, "err", err)
		n.giveUp(tenant, game, owner)
		return
	}
	var ck *checkpoint
	if mod.HasCheckpoint && len(seqs) > 0 {
		if resp, err := n.cfg.Etcd.Get(ctx, checkpointKey(tenant, game)); err == nil && len(resp.Kvs) > 0 {
			if c, err := decodeCheckpoint(resp.Kvs[0].Value); err == nil && c.Seq <= seqs[len(seqs)-1] {
				ck = c
			}
		}
	}
	inst, hashes, fromCk, err := replayFrom(ctx, mod, spec, chunks, seqs, ck, log)
	if de := (*DesyncError)(nil); errors.As(err, &de) {
		// Counted in ludus_desyncs_total by ReplayModule.
		log.Error("desync on resume: the game cannot resume", "build", spec.BuildID, "tick", de.Tick, "err", err)
	} else if err != nil {
		log.Error("replay failed; the game cannot resume", "build", spec.BuildID, "err", err)
	}
	if err != nil {
		n.failGame(ctx, spec, owner, fence, err.Error())
		return
	}
	// The owner key must still be ours: someone may have taken it meanwhile.
	resp, err := n.cfg.Etcd.Get(ctx, fleet.OwnerKey(tenant, game))
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != owner || sess.isFenced() {
		inst.Close(ctx)
		return
	}
	fence = resp.Kvs[0].CreateRevision
	if clientv3.LeaseID(resp.Kvs[0].Lease) != sess.lease {
		// A claim of this node's previous lease (it was fenced, e.g. during an
		// etcd outage, and registered again): that lease is no longer renewed
		// and will expire, and with it the claim. Resuming under it would move
		// the game a second time; re-claim it under the current lease first.
		if owner, err = n.reclaim(ctx, tenant, game, owner, fence, sess); err != nil {
			log.Warn("cannot re-claim a game of this node's previous lease; another node will take it", "err", err)
			inst.Close(ctx)
			return
		}
	}
	g := newGame(n, sess, spec, mod, inst, fence, owner)
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
		inst.Close(ctx)
		return
	}
	n.count.Add(1)
	tick := inst.Tick() // the actor owns inst once it runs
	go g.run()
	log.Info("game resumed", "tick", tick, "chunks", len(chunks), "hashes_checked", len(hashes), "from_checkpoint", fromCk,
		"resume_ms", time.Since(start).Milliseconds(), "build", spec.BuildID)
}

// reclaim moves a claim of an older lease of this node to the current lease,
// under a new claim id, fenced on the old claim: if the old claim is gone (its
// lease expired and another node claimed the game) nothing changes.
func (n *Node) reclaim(ctx context.Context, tenant, game, owner string, fence int64, sess *session) (string, error) {
	k := fleet.OwnerKey(tenant, game)
	next := fleet.OwnerValue(n.cfg.ID, newClaimID())
	resp, err := n.cfg.Etcd.Txn(ctx).If(
		clientv3.Compare(clientv3.Value(k), "=", owner),
		clientv3.Compare(clientv3.CreateRevision(k), "=", fence),
	).Then(clientv3.OpPut(k, next, clientv3.WithLease(sess.lease))).Commit()
	if err != nil {
		return "", err
	}
	if !resp.Succeeded {
		return "", errors.New("the old claim changed before it could be re-claimed")
	}
	n.reclaims.Add(1)
	return next, nil
}

// giveUp releases a claim this node cannot honour, so another node tries.
func (n *Node) giveUp(tenant, game, owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
	defer cancel()
	k := fleet.OwnerKey(tenant, game)
	_, _ = n.cfg.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", owner)).Then(clientv3.OpDelete(k)).Commit()
}

// failGame marks a game that cannot be rebuilt (a desync, or it crashed on its
// last tick) as failed and releases it, fenced by the claim.
func (n *Node) failGame(ctx context.Context, spec fleet.GameSpec, owner string, fence int64, msg string) {
	st, _ := json.Marshal(fleet.GameStatus{State: fleet.StateFailed, NodeID: n.cfg.ID, Message: msg})
	k := fleet.OwnerKey(spec.TenantID, spec.GameID)
	_, _ = n.cfg.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", owner)).
		Then(clientv3.OpPut(fleet.StatusKey(spec.TenantID, spec.GameID), string(st)), clientv3.OpDelete(k)).Commit()
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
					g.accounts[e.Account] = i
					g.players++
				}
			case 2: // leave
				if s.account != "" {
					delete(g.accounts, s.account)
					s.account, s.name = "", ""
					g.players--
				}
			case 3: // input
				if e.Seq > s.lastSeq {
					s.lastSeq, s.lastTick = e.Seq, e.Tick
				}
			}
		}
	}
}

// readLogWithSeqs is ReadLog that also returns each chunk's sequence number.
func readLogWithSeqs(ctx context.Context, cli *clientv3.Client, tenant, game string) (fleet.GameSpec, []*inputlog.Chunk, []uint64, error) {
	spec, chunks, keys, err := readLog(ctx, cli, tenant, game)
	if err != nil {
		return spec, nil, nil, err
	}
	seqs := make([]uint64, len(keys))
	for i, k := range keys {
		v, err := strconv.ParseUint(k[strings.LastIndexByte(k, '/')+1:], 16, 64)
		if err != nil {
			return spec, nil, nil, fmt.Errorf("log key %s: %w", k, err)
		}
		seqs[i] = v
	}
	return spec, chunks, seqs, nil
}

// archiveIfFirst archives a finished game if this node ranks first for it.
func (n *Node) archiveIfFirst(tenant, game string) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
	nodes, err := (&fleet.View{Client: n.cfg.Etcd}).Nodes(ctx)
	cancel()
	if err != nil {
		return
	}
	if r := fleet.Rank(nodes, game, fleet.RankOptions{}); len(r) > 0 && r[0].ID == n.cfg.ID {
		n.archive(tenant, game)
	}
}
