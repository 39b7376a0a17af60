// Package fleet holds Ludus's fleet operations and placement policy: the
// operators' FleetService (Control: drain a node, hand a game off), the
// backend's listing of nodes and games (Admin), and Rank, the one placement
// function (weighted rendezvous hashing) gateways and sim nodes share. The
// cluster's state itself — its keys in etcd, the records stored there and the
// claim protocol — is package clusterstate's.
package fleet

import "ludus.dev/ludus/clusterstate"

// NodeInfo is clusterstate.NodeInfo. Only Rank's own body and its test
// (rendezvous.go, rendezvous_test.go) still spell it unqualified; everything
// else names clusterstate. Delete it once those two say clusterstate.NodeInfo.
type NodeInfo = clusterstate.NodeInfo
