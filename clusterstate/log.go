package clusterstate

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LogChunk is one chunk of a game's input log, still encoded
// (simnode/inputlog).
type LogChunk struct {
	Seq  uint64
	Data []byte
}

// GameLog is a game's spec, status, owner and whole input log as of one
// revision.
type GameLog struct {
	Spec GameSpec
	// SpecJSON is the spec as stored (the archive keeps it verbatim).
	SpecJSON []byte
	// SpecRevision is the spec key's create revision (RemoveGame).
	SpecRevision int64
	Status       GameStatus
	// Owner is the owner key's value, "" when the game has no owner.
	Owner  string
	Chunks []LogChunk
	// Revision is the revision read; WatchLog from Revision+1 continues it.
	Revision int64
}

// ReadLog reads a game's spec, status, owner and every log chunk in one
// transaction (ErrGameNotFound when it has no spec).
func (c *Client) ReadLog(ctx context.Context, tenant, game string) (*GameLog, error) {
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpGet(GameKey(tenant, game)),
		clientv3.OpGet(StatusKey(tenant, game)),
		clientv3.OpGet(OwnerKey(tenant, game)),
		clientv3.OpGet(LogPrefix(tenant, game), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
	).Commit()
	if err != nil {
		return nil, err
	}
	specKV := resp.Responses[0].GetResponseRange().Kvs
	if len(specKV) == 0 {
		return nil, fmt.Errorf("%w: game %s", ErrGameNotFound, game)
	}
	l := &GameLog{SpecJSON: specKV[0].Value, SpecRevision: specKV[0].CreateRevision, Revision: resp.Header.Revision}
	if err := json.Unmarshal(specKV[0].Value, &l.Spec); err != nil {
		return nil, fmt.Errorf("clusterstate: game %s spec: %w", game, err)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		_ = json.Unmarshal(kvs[0].Value, &l.Status)
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		l.Owner = string(kvs[0].Value)
	}
	logs := resp.Responses[3].GetResponseRange().Kvs
	l.Chunks = make([]LogChunk, 0, len(logs))
	for _, kv := range logs {
		seq, err := logSeq(string(kv.Key))
		if err != nil {
			return nil, err
		}
		l.Chunks = append(l.Chunks, LogChunk{Seq: seq, Data: kv.Value})
	}
	return l, nil
}

// WatchLog sends the game's log chunks written from revision from on (a
// spectator replica tails the log this way). The channel is closed when ctx
// ends or the watch fails.
func (c *Client) WatchLog(ctx context.Context, tenant, game string, from int64) <-chan LogChunk {
	out := make(chan LogChunk, 64)
	go func() {
		defer close(out)
		wch := c.cli.Watch(ctx, LogPrefix(tenant, game), clientv3.WithPrefix(), clientv3.WithRev(from))
		for wr := range wch {
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				seq, err := logSeq(string(ev.Kv.Key))
				if err != nil {
					continue
				}
				select {
				case out <- LogChunk{Seq: seq, Data: ev.Kv.Value}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// WatchFinal sends the game's status once it is finished (ended or failed),
// as written from revision from on, and closes the channel: a spectator
// replica learns so of an end its log does not show (a game failed by its
// owner or an operator has no ended chunk). The channel is also closed when
// ctx ends or the watch fails.
func (c *Client) WatchFinal(ctx context.Context, tenant, game string, from int64) <-chan GameStatus {
	out := make(chan GameStatus, 1)
	go func() {
		defer close(out)
		for wr := range c.cli.Watch(ctx, StatusKey(tenant, game), clientv3.WithRev(from), clientv3.WithFilterDelete()) {
			for _, ev := range wr.Events {
				var st GameStatus
				if json.Unmarshal(ev.Kv.Value, &st) != nil || !st.Finished() {
					continue
				}
				out <- st
				return
			}
		}
	}()
	return out
}

// Checkpoint returns the game's newest checkpoint as stored, nil when it has
// none.
func (c *Client) Checkpoint(ctx context.Context, tenant, game string) ([]byte, error) {
	resp, err := c.cli.Get(ctx, CheckpointKey(tenant, game))
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return resp.Kvs[0].Value, nil
}

// RemoveGame deletes every key of a finished, archived game — log,
// checkpoint, status, spec — if its spec is still the one read (its create
// revision is specRevision) and it has no owner. It reports whether it did.
func (c *Client) RemoveGame(ctx context.Context, tenant, game string, specRevision int64) (bool, error) {
	resp, err := c.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(GameKey(tenant, game)), "=", specRevision),
		clientv3.Compare(clientv3.CreateRevision(OwnerKey(tenant, game)), "=", 0),
	).Then(
		clientv3.OpDelete(LogPrefix(tenant, game), clientv3.WithPrefix()),
		clientv3.OpDelete(CheckpointKey(tenant, game)),
		clientv3.OpDelete(StatusKey(tenant, game)),
		clientv3.OpDelete(GameKey(tenant, game)),
	).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
