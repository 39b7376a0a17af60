package clusterstate

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// View reads the fleet's state from etcd, one request per call (the gateway's
// Directory answers the hot path from a watch instead).
type View struct {
	Client *Client
}

// View returns a View of c.
func (c *Client) View() *View { return &View{Client: c} }

// Nodes lists registered sim nodes, sorted by id.
func (v *View) Nodes(ctx context.Context) ([]NodeInfo, error) {
	resp, err := v.Client.cli.Get(ctx, NodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	nodes := make([]NodeInfo, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n NodeInfo
		if json.Unmarshal(kv.Value, &n) == nil {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, nil
}

// Node returns one node (ErrNodeNotFound when it is not registered).
func (v *View) Node(ctx context.Context, id string) (NodeInfo, error) {
	if !ValidID(id) {
		return NodeInfo{}, fmt.Errorf("%w: %q", ErrNodeNotFound, id)
	}
	resp, err := v.Client.cli.Get(ctx, NodeKey(id))
	if err != nil {
		return NodeInfo{}, err
	}
	if len(resp.Kvs) == 0 {
		return NodeInfo{}, fmt.Errorf("%w: %s", ErrNodeNotFound, id)
	}
	var n NodeInfo
	err = json.Unmarshal(resp.Kvs[0].Value, &n)
	return n, err
}

// Game is a game's spec, status and owner as read together.
type Game struct {
	Spec   GameSpec
	Status GameStatus
	Owner  string // node id, empty when no node owns it
}

// Game reads one game of a tenant. A game of another tenant is
// ErrGameNotFound.
func (v *View) Game(ctx context.Context, tenant, game string) (Game, error) {
	if !ValidID(tenant) || !ValidID(game) {
		return Game{}, fmt.Errorf("%w: %q", ErrGameNotFound, game)
	}
	resp, err := v.Client.cli.Txn(ctx).Then(
		clientv3.OpGet(GameKey(tenant, game)),
		clientv3.OpGet(StatusKey(tenant, game)),
		clientv3.OpGet(OwnerKey(tenant, game)),
	).Commit()
	if err != nil {
		return Game{}, err
	}
	specKV := resp.Responses[0].GetResponseRange().Kvs
	if len(specKV) == 0 {
		return Game{}, fmt.Errorf("%w: %q", ErrGameNotFound, game)
	}
	var g Game
	if err := json.Unmarshal(specKV[0].Value, &g.Spec); err != nil {
		return Game{}, fmt.Errorf("clusterstate: game %s spec: %w", game, err)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		_ = json.Unmarshal(kvs[0].Value, &g.Status)
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		g.Owner, _ = ParseOwner(string(kvs[0].Value))
	}
	return g, nil
}

// Games lists a tenant's games, newest first.
func (v *View) Games(ctx context.Context, tenant string) ([]Game, error) {
	if !ValidID(tenant) {
		return nil, nil
	}
	resp, err := v.Client.cli.Txn(ctx).Then(
		clientv3.OpGet(GamesPrefix(tenant), clientv3.WithPrefix()),
		clientv3.OpGet(StatusPrefix(tenant), clientv3.WithPrefix()),
		clientv3.OpGet(OwnersPrefix()+tenant+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, err
	}
	byID := map[string]*Game{}
	var games []*Game
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		g := &Game{}
		if json.Unmarshal(kv.Value, &g.Spec) != nil {
			continue
		}
		byID[g.Spec.GameID] = g
		games = append(games, g)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if g := byID[lastSegment(string(kv.Key))]; g != nil {
			_ = json.Unmarshal(kv.Value, &g.Status)
		}
	}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if g := byID[lastSegment(string(kv.Key))]; g != nil {
			g.Owner, _ = ParseOwner(string(kv.Value))
		}
	}
	sort.Slice(games, func(i, j int) bool { return games[i].Spec.CreatedAt.After(games[j].Spec.CreatedAt) })
	out := make([]Game, len(games))
	for i, g := range games {
		out[i] = *g
	}
	return out, nil
}
