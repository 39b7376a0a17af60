// Package fleet holds Ludus's fleet operations and placement policy: the
// operators' FleetService (Control: drain a node, hand a game off), the
// backend's listing of nodes and games (Admin), and Rank, the one placement
// function (weighted rendezvous hashing) gateways and sim nodes share. The
// cluster's state itself — its keys in etcd, the records stored there and the
// claim protocol — is package clusterstate's.
package fleet

import "ludus.dev/ludus/clusterstate"

// Aliases of clusterstate's records and keys for packages not yet moved to
// it (the gateway's routing, and its tests). New code names clusterstate.
type (
	NodeInfo   = clusterstate.NodeInfo
	GameSpec   = clusterstate.GameSpec
	GameStatus = clusterstate.GameStatus
	Game       = clusterstate.Game
)

// Game states (clusterstate's).
const (
	StateRunning = clusterstate.StateRunning
	StateEnded   = clusterstate.StateEnded
	StateFailed  = clusterstate.StateFailed
)

// ErrNotFound is clusterstate.ErrGameNotFound: View.Game's "no such game".
var ErrNotFound = clusterstate.ErrGameNotFound

// NodeKey is clusterstate.NodeKey.
func NodeKey(node string) string { return clusterstate.NodeKey(node) }

// OwnerKey is clusterstate.OwnerKey.
func OwnerKey(tenant, game string) string { return clusterstate.OwnerKey(tenant, game) }
