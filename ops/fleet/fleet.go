// Package fleet is the shape of the cluster in etcd: where sim nodes register,
// where games, their owners, their status and their input logs live, and a
// read-only view of it for the gateway, the backend and `ludus ctl`.
//
// Key layout (every key is under Prefix; tenant ids namespace game keys):
//
//	/ludus/nodes/{node}                  NodeInfo JSON, bound to the node's lease
//	/ludus/games/{tenant}/{game}         GameSpec JSON (immutable)
//	/ludus/owners/{tenant}/{game}        owning node id, bound to its lease; the key's
//	                                     create revision is the fencing token
//	/ludus/status/{tenant}/{game}        GameStatus JSON, written with each log append
//	/ludus/logs/{tenant}/{game}/{seq}    input log chunks (package simnode/inputlog)
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prefix is the root of every Ludus key in etcd.
const Prefix = "/ludus/"

// Key builders.
func NodesPrefix() string                 { return Prefix + "nodes/" }
func NodeKey(node string) string          { return NodesPrefix() + node }
func GamesPrefix(tenant string) string    { return Prefix + "games/" + tenant + "/" }
func GameKey(tenant, game string) string  { return GamesPrefix(tenant) + game }
func OwnersPrefix() string                { return Prefix + "owners/" }
func OwnerKey(tenant, game string) string { return OwnersPrefix() + tenant + "/" + game }
func StatusPrefix(tenant string) string   { return Prefix + "status/" + tenant + "/" }
func StatusKey(tenant, game string) string {
	return StatusPrefix(tenant) + game
}
func LogPrefix(tenant, game string) string { return Prefix + "logs/" + tenant + "/" + game + "/" }
func LogKey(tenant, game string, seq uint64) string {
	return fmt.Sprintf("%s%016x", LogPrefix(tenant, game), seq)
}

// OwnerValue is the value of an owner key: the node id and a claim id unique to
// this claim, so that an append compares not just "which node" but "which claim"
// (a game handed from A to B and back to A is a new claim).
func OwnerValue(node, claim string) string { return node + "/" + claim }

// ParseOwner splits an owner key's value into node id and claim id.
func ParseOwner(v string) (node, claim string) {
	node, claim, _ = strings.Cut(v, "/")
	return node, claim
}

// DrainKey marks a node as asked to drain; the node watches it.
func DrainKey(node string) string { return Prefix + "drain/" + node }

// NodeInfo is what a sim node publishes about itself.
type NodeInfo struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"` // base URL of its NodeService, e.g. http://127.0.0.1:7001
	Region   string `json:"region"`
	Capacity int    `json:"capacity"`
	Games    int    `json:"games"`
	Draining bool   `json:"draining"`
	// Lease is the node's current lease: a node handing a game over binds the
	// owner key to the receiving node's lease.
	Lease int64 `json:"lease"`
}

// GameSpec is everything needed to (re)build a game from its log.
type GameSpec struct {
	TenantID     string    `json:"tenant_id"`
	GameID       string    `json:"game_id"`
	ModuleName   string    `json:"module_name"`
	BuildID      string    `json:"build_id"`
	Seed         uint64    `json:"seed"`
	Config       []byte    `json:"config"`
	CreatedAt    time.Time `json:"created_at"`
	TickRate     int       `json:"tick_rate"`
	MaxPlayers   int       `json:"max_players"`
	FrameDivisor int       `json:"frame_divisor"`
	ViewFormat   string    `json:"view_format"`
	// InputKind is the module's abi.InputState or abi.InputEvent.
	InputKind string `json:"input_kind,omitempty"`
	// SnapshotFormat is set when the module sends snapshots it renders itself.
	SnapshotFormat string `json:"snapshot_format,omitempty"`
	ViewWidth      int    `json:"view_width,omitempty"`
	ViewHeight     int    `json:"view_height,omitempty"`
	// MatchCredential lets whichever node runs the game report its progress and
	// result to the backend (and only this match's). It lives with the spec so it
	// survives failover; etcd is cluster-internal.
	MatchCredential string `json:"match_credential,omitempty"`
}

// Game states.
const (
	StateRunning = "running"
	StateEnded   = "ended"
	StateFailed  = "failed"
)

// GameStatus is the latest durable status of a game.
type GameStatus struct {
	State   string `json:"state"`
	Tick    int64  `json:"tick"`
	Players int    `json:"players"`
	NodeID  string `json:"node_id"`
	Message string `json:"message,omitempty"`
}

// ErrNotFound is returned for games, owners or nodes that do not exist.
var ErrNotFound = errors.New("fleet: not found")

// View reads the fleet's state from etcd.
type View struct {
	Client *clientv3.Client
}

// Nodes lists registered sim nodes, sorted by id.
func (v *View) Nodes(ctx context.Context) ([]NodeInfo, error) {
	resp, err := v.Client.Get(ctx, NodesPrefix(), clientv3.WithPrefix())
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

// Node returns one node.
func (v *View) Node(ctx context.Context, id string) (NodeInfo, error) {
	resp, err := v.Client.Get(ctx, NodeKey(id))
	if err != nil {
		return NodeInfo{}, err
	}
	if len(resp.Kvs) == 0 {
		return NodeInfo{}, fmt.Errorf("%w: node %s", ErrNotFound, id)
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

// Game reads one game of a tenant. A game of another tenant is ErrNotFound.
func (v *View) Game(ctx context.Context, tenant, game string) (Game, error) {
	if !validID(tenant) || !validID(game) {
		return Game{}, fmt.Errorf("%w: game %q", ErrNotFound, game)
	}
	resp, err := v.Client.Txn(ctx).Then(
		clientv3.OpGet(GameKey(tenant, game)),
		clientv3.OpGet(StatusKey(tenant, game)),
		clientv3.OpGet(OwnerKey(tenant, game)),
	).Commit()
	if err != nil {
		return Game{}, err
	}
	specKV := resp.Responses[0].GetResponseRange().Kvs
	if len(specKV) == 0 {
		return Game{}, fmt.Errorf("%w: game %q", ErrNotFound, game)
	}
	var g Game
	if err := json.Unmarshal(specKV[0].Value, &g.Spec); err != nil {
		return Game{}, fmt.Errorf("fleet: game %s spec: %w", game, err)
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
	if !validID(tenant) {
		return nil, nil
	}
	resp, err := v.Client.Txn(ctx).Then(
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

func lastSegment(k string) string { return k[strings.LastIndexByte(k, '/')+1:] }

// validID reports whether s can be a path segment of a key: ids are generated by
// Ludus, so anything else (slashes, empty, huge) is simply not found.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidID reports whether s is an acceptable tenant or game id.
func ValidID(s string) bool { return validID(s) }
