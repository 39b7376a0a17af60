package clusterstate

import (
	"context"
	"encoding/json"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// OwnerEvent is a change of a game's owner key.
type OwnerEvent struct {
	// Owner is the new claim; for a deletion only Tenant and Game are set.
	Owner
	Deleted bool
}

// OwnerWatch selects the owner keys WatchOwners follows.
type OwnerWatch struct {
	// Tenant limits the watch to one tenant's games; "" watches every game.
	Tenant string
	// From is the first revision to report; 0 reports changes from now.
	From int64
	// RequireLeader ends the watch when the etcd member it is served by loses
	// its cluster's leader, instead of waiting on a partitioned member (the
	// caller watches again, reaching a member that has one).
	RequireLeader bool
}

// WatchOwners sends changes of owner keys, one slice per etcd watch response.
// The channel is closed when ctx ends or the watch fails (a compaction, a
// lost leader): watch again, and read what may have been missed.
func (c *Client) WatchOwners(ctx context.Context, w OwnerWatch) <-chan []OwnerEvent {
	out := make(chan []OwnerEvent)
	prefix := OwnersPrefix()
	if w.Tenant != "" {
		prefix += w.Tenant + "/"
	}
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if w.From > 0 {
		opts = append(opts, clientv3.WithRev(w.From))
	}
	if w.RequireLeader {
		ctx = clientv3.WithRequireLeader(ctx)
	}
	go func() {
		defer close(out)
		for resp := range c.cli.Watch(ctx, prefix, opts...) {
			if resp.Err() != nil {
				return
			}
			evs := make([]OwnerEvent, 0, len(resp.Events))
			for _, ev := range resp.Events {
				tenant, game, ok := splitGameKey(string(ev.Kv.Key), OwnersPrefix())
				if !ok {
					continue
				}
				e := OwnerEvent{Owner: Owner{Claim: Claim{Tenant: tenant, Game: game}}, Deleted: ev.Type == mvccpb.DELETE}
				if !e.Deleted {
					e.Claim.Owner, e.Claim.Fence, e.Lease = string(ev.Kv.Value), ev.Kv.CreateRevision, ev.Kv.Lease
				}
				evs = append(evs, e)
			}
			select {
			case out <- evs:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// GameState is one game's status and owner as found by ScanGames.
type GameState struct {
	Tenant, Game string
	Status       GameStatus
	// StatusRevision is the status key's last modification.
	StatusRevision int64
	// Owner is the game's owner key; Owned is false when it has none.
	Owner Owner
	Owned bool
}

// ScanGames reads every game's status and owner at one revision (sim nodes'
// sweep for orphaned and unarchived games), and that revision. Games whose
// status is unreadable are left out.
func (c *Client) ScanGames(ctx context.Context) ([]GameState, int64, error) {
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(allStatusPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(OwnersPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, err
	}
	owners := map[string]Owner{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if t, g, ok := splitGameKey(string(kv.Key), OwnersPrefix()); ok {
			owners[t+"/"+g] = Owner{Claim: Claim{Tenant: t, Game: g, Owner: string(kv.Value), Fence: kv.CreateRevision}, Lease: kv.Lease}
		}
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	games := make([]GameState, 0, len(kvs))
	for _, kv := range kvs {
		tenant, game, ok := splitGameKey(string(kv.Key), allStatusPrefix())
		if !ok {
			continue
		}
		gs := GameState{Tenant: tenant, Game: game, StatusRevision: kv.ModRevision}
		if json.Unmarshal(kv.Value, &gs.Status) != nil {
			continue
		}
		gs.Owner, gs.Owned = owners[tenant+"/"+game]
		games = append(games, gs)
	}
	return games, resp.Header.Revision, nil
}

// RequestDrain asks a node to drain: it hands its games over and exits.
func (c *Client) RequestDrain(ctx context.Context, node string) error {
	_, err := c.cli.Put(ctx, DrainKey(node), "drain")
	return err
}

// ClearDrain removes a node's drain request once it has drained, so a node
// restarted under the same id (a StatefulSet pod) does not drain again.
func (c *Client) ClearDrain(ctx context.Context, node string) error {
	_, err := c.cli.Delete(ctx, DrainKey(node))
	return err
}

// AwaitDrain returns nil once the node's drain key is set (RequestDrain), or
// ctx's error when ctx ends first.
func (c *Client) AwaitDrain(ctx context.Context, node string) error {
	key := DrainKey(node)
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, key)
		if err == nil && len(resp.Kvs) > 0 {
			return nil
		}
		rev := int64(0)
		if err == nil {
			rev = resp.Header.Revision + 1
		}
		for wr := range c.cli.Watch(ctx, key, clientv3.WithRev(rev)) {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					return nil
				}
			}
		}
	}
	return ctx.Err()
}
