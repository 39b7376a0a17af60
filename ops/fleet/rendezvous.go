package fleet

import (
	"hash/fnv"
	"math"
	"sort"

	"ludus.dev/ludus/clusterstate"
)

// RankOptions narrows Rank.
type RankOptions struct {
	// Exclude is a node that must not be chosen (a spectator replica must not
	// be the game's owner).
	Exclude string
	// Region, if set, ranks the nodes of that region before all others (the
	// others remain as a fallback, in their own order).
	Region string
}

// Rank orders the nodes that can take work keyed by key (a game id) by
// weighted rendezvous hashing: each node scores free / -ln(u), u being a hash
// of the node and the key mapped to (0, 1), and free its unused capacity. It
// is the one placement function of the fleet: game placement, spectator
// replica placement and takeover ranking all use it, so every gateway and node
// computes the same order without talking to each other. The weights make a
// node with twice the free capacity twice as likely to come first; adding or
// removing a node moves only the keys whose first choice it is (the scores of
// the other nodes do not change). Draining nodes, full nodes, nodes without an
// address and opts.Exclude are left out.
func Rank(nodes []clusterstate.NodeInfo, key string, opts RankOptions) []clusterstate.NodeInfo {
	type scored struct {
		n        clusterstate.NodeInfo
		local    bool
		score    float64
		tiebreak string
	}
	out := make([]scored, 0, len(nodes))
	for _, n := range nodes {
		free := n.Capacity - n.Games
		if n.ID == opts.Exclude || n.Draining || free <= 0 || n.Addr == "" {
			continue
		}
		out = append(out, scored{n: n, local: opts.Region == "" || n.Region == opts.Region,
			score: float64(free) / -math.Log(unitHash(n.ID, key)), tiebreak: n.ID})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].local != out[j].local {
			return out[i].local
		}
		if out[i].score != out[j].score {
			return out[i].score > out[j].score
		}
		return out[i].tiebreak < out[j].tiebreak
	})
	ranked := make([]NodeInfo, len(out))
	for i, s := range out {
		ranked[i] = s.n
	}
	return ranked
}

// unitHash maps (node, key) to a uniform value in (0, 1).
func unitHash(node, key string) float64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write([]byte(key))
	// FNV's low bits mix poorly for short inputs; fold before taking 53 bits.
	v := h.Sum64()
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	return (float64(v>>11) + 0.5) / (1 << 53)
}
