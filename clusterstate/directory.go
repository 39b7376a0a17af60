package clusterstate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrOwnerChanged is the cause a tracked call is cancelled with when its game's
// owner became another node, or none (Directory.Track).
var ErrOwnerChanged = errors.New("clusterstate: the game's owner changed")

// Counter counts etcd reads (a prometheus.Counter does).
type Counter interface{ Inc() }

// Directory is an in-memory view of where games run: every sim node's record
// and every running game's owner, read once and then kept current by a watch
// of the node and owner keys. Routing a call or attaching a stream reads it,
// not etcd, so the steady-state hot path costs no etcd round trip (reads
// counts the loads; a caller counts its own fallbacks to View on the same
// counter). A stale entry corrects itself: a node that no longer has the game
// answers NotFound/Unavailable, the caller retries and by then the watch has
// moved the entry. The same watch abandons calls in flight to a node that
// stops owning their game (Track), and wakes whoever waits for a moving
// game's new owner (Changed). It runs until the Client is closed.
type Directory struct {
	c     *Client
	reads Counter

	mu      sync.RWMutex
	synced  bool  // loaded, and the watch is current
	rev     int64 // etcd revision the directory reflects
	nodes   map[string]NodeInfo
	owners  map[string]string // tenant/game -> node id
	changes chan struct{}     // closed and replaced on every change
	calls   map[string]map[*ownerCall]struct{}
}

// ownerCall is one call in flight to the node named node.
type ownerCall struct {
	node   string
	cancel context.CancelCauseFunc
}

// NewDirectory starts a Directory of c; reads (may be nil) counts its loads.
func NewDirectory(c *Client, reads Counter) *Directory {
	if reads == nil {
		reads = nopCounter{}
	}
	d := &Directory{c: c, reads: reads, changes: make(chan struct{}),
		nodes: map[string]NodeInfo{}, owners: map[string]string{}, calls: map[string]map[*ownerCall]struct{}{}}
	go d.run()
	return d
}

type nopCounter struct{}

func (nopCounter) Inc() {}

// run loads and watches until the etcd client closes; after a watch error
// (a compaction, a partition) it loads again.
func (d *Directory) run() {
	ctx := d.c.cli.Ctx()
	for ctx.Err() == nil {
		rev, err := d.load(ctx)
		if err == nil {
			d.watch(ctx, rev)
		}
		d.mu.Lock()
		d.synced = false
		d.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// load reads every node and owner at one revision.
func (d *Directory) load(ctx context.Context) (int64, error) {
	d.reads.Inc()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := d.c.cli.Txn(lctx).Then(
		clientv3.OpGet(NodesPrefix(), clientv3.WithPrefix()),
		clientv3.OpGet(OwnersPrefix(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, err
	}
	nodes := map[string]NodeInfo{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var n NodeInfo
		if json.Unmarshal(kv.Value, &n) == nil {
			nodes[n.ID] = n
		}
	}
	owners := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		node, _ := ParseOwner(string(kv.Value))
		owners[strings.TrimPrefix(string(kv.Key), OwnersPrefix())] = node
	}
	d.mu.Lock()
	old := d.owners
	d.nodes, d.owners, d.rev, d.synced = nodes, owners, resp.Header.Revision, true
	d.broadcastLocked()
	d.mu.Unlock()
	// Calls to owners that changed while the watch was down.
	for game, node := range old {
		if owners[game] != node {
			d.cancelCalls(game, owners[game])
		}
	}
	return resp.Header.Revision, nil
}

// watch applies changes after rev until the watch fails.
func (d *Directory) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	nodes := d.c.cli.Watch(wctx, NodesPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	owners := d.c.cli.Watch(wctx, OwnersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-nodes:
		case resp, ok = <-owners:
		}
		if !ok || resp.Err() != nil || resp.Canceled {
			return
		}
		for _, ev := range resp.Events {
			d.apply(ev, resp.Header.Revision)
		}
	}
}

// apply records one change of a node or owner key.
func (d *Directory) apply(ev *clientv3.Event, rev int64) {
	key := string(ev.Kv.Key)
	d.mu.Lock()
	if rev > d.rev {
		d.rev = rev
	}
	if id, ok := strings.CutPrefix(key, NodesPrefix()); ok {
		if ev.Type == mvccpb.PUT {
			var n NodeInfo
			if json.Unmarshal(ev.Kv.Value, &n) == nil {
				d.nodes[n.ID] = n
			}
		} else {
			delete(d.nodes, id)
		}
		d.broadcastLocked()
		d.mu.Unlock()
		return
	}
	game := strings.TrimPrefix(key, OwnersPrefix())
	node := ""
	if ev.Type == mvccpb.PUT {
		node, _ = ParseOwner(string(ev.Kv.Value))
		d.owners[game] = node
	} else {
		delete(d.owners, game)
	}
	d.broadcastLocked()
	d.mu.Unlock()
	d.cancelCalls(game, node)
}

func (d *Directory) broadcastLocked() {
	close(d.changes)
	d.changes = make(chan struct{})
}

// Revision is the etcd revision the directory reflects, and whether it is
// current (loaded, and its watch running).
func (d *Directory) Revision() (int64, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.rev, d.synced
}

// Owner returns the node running a game, when the directory knows it and the
// node's record (with an address).
func (d *Directory) Owner(tenant, game string) (NodeInfo, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.synced {
		return NodeInfo{}, false
	}
	id, ok := d.owners[tenant+"/"+game]
	if !ok {
		return NodeInfo{}, false
	}
	n, ok := d.nodes[id]
	return n, ok && n.Addr != ""
}

// Node returns one node's record, when the directory knows it.
func (d *Directory) Node(id string) (NodeInfo, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	n, ok := d.nodes[id]
	return n, d.synced && ok && n.Addr != ""
}

// Nodes returns every node's record, when the directory is current.
func (d *Directory) Nodes() ([]NodeInfo, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.synced {
		return nil, false
	}
	out := make([]NodeInfo, 0, len(d.nodes))
	for _, n := range d.nodes {
		out = append(out, n)
	}
	return out, true
}

// Changed returns a channel closed at the directory's next change.
func (d *Directory) Changed() <-chan struct{} {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.changes
}

// cancelCalls cancels the game's calls to any node but its new owner.
func (d *Directory) cancelCalls(game, node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.calls[game] {
		if c.node != node {
			c.cancel(ErrOwnerChanged)
		}
	}
}

// Track returns a context for a call to node about tenant/game that is
// cancelled with cause ErrOwnerChanged when the game's owner becomes another
// node (or none); call done after.
func (d *Directory) Track(ctx context.Context, tenant, game, node string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	key := tenant + "/" + game
	c := &ownerCall{node: node, cancel: cancel}
	d.mu.Lock()
	if d.synced && d.owners[key] != node {
		// The directory already knows the game has another owner (or none):
		// a call to node would wait on a node that lost it, maybe frozen.
		cancel(ErrOwnerChanged)
	}
	if d.calls[key] == nil {
		d.calls[key] = map[*ownerCall]struct{}{}
	}
	d.calls[key][c] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.calls[key], c)
		if len(d.calls[key]) == 0 {
			delete(d.calls, key)
		}
		d.mu.Unlock()
		cancel(nil)
	}
}
