package gateway

import (
	"context"

	"ludus.dev/ludus/clusterstate"
)

// errOwnerChanged cancels calls to a node that no longer owns their game.
var errOwnerChanged = clusterstate.ErrOwnerChanged

// directory is the gateway's in-memory view of where games run: a
// clusterstate.Directory (every sim node's record and every running game's
// owner, read once and kept current by a watch), so routing a call or
// attaching a stream costs no etcd round trip. Its loads count in
// ludus_gateway_etcd_reads_total, as do the gateway's own fallbacks to a
// View (listings, and lookups of games the directory does not know — which
// do not exist, are over, or are moving). The watch also abandons calls in
// flight to a node that stops owning their game (track) and wakes streams
// waiting for a moving game's new owner (changed).
type directory struct{ d *clusterstate.Directory }

func newDirectory(c *clusterstate.Client, reads clusterstate.Counter) *directory {
	return &directory{d: clusterstate.NewDirectory(c, reads)}
}

// owner returns the node running a game, when the directory knows it.
func (d *directory) owner(tenant, game string) (clusterstate.NodeInfo, bool) {
	return d.d.Owner(tenant, game)
}

// nodeRecord returns one node's record, when the directory knows it.
func (d *directory) nodeRecord(id string) (clusterstate.NodeInfo, bool) { return d.d.Node(id) }

// nodeList returns every node's record, when the directory is current.
func (d *directory) nodeList() ([]clusterstate.NodeInfo, bool) { return d.d.Nodes() }

// changed returns a channel closed at the directory's next change.
func (d *directory) changed() <-chan struct{} { return d.d.Changed() }

// track returns a context for a call to node about tenant/game that is
// cancelled (cause errOwnerChanged) when the game's owner becomes another node
// (or none); call done after.
func (d *directory) track(ctx context.Context, tenant, game, node string) (context.Context, func()) {
	return d.d.Track(ctx, tenant, game, node)
}
