// Package autoscale turns the fleet's load into scaling signals: free game
// sessions per region (FreeSessions), a webhook answering Agones'
// FleetAutoscaler (Webhook), and a Prometheus collector of the same figures
// (NewCollector).
//
// The package does not read etcd itself: a Source, injected by the role that
// serves it, lists the free sessions per region. The role adapts the fleet's
// node records into Loads and calls FreeSessions.
package autoscale

import "context"

// Load is one sim node as the fleet sees it.
type Load struct {
	Node     string
	Region   string
	Capacity int // games the node may run (its --capacity)
	Games    int // games it runs
	Draining bool
}

// Free is the room in one region.
type Free struct {
	// Sessions is the sum, over the region's nodes that are not draining, of
	// capacity − games (a node over its capacity counts 0, never less).
	Sessions int
	// Nodes counts the region's registered nodes, draining ones included.
	Nodes int
	// Draining counts the nodes of Nodes that are draining.
	Draining int
}

// Source lists the free sessions of every region that has a registered node.
// It is called on every webhook request and every scrape: it should read a
// cached or cheap view, and honour ctx.
type Source func(ctx context.Context) (map[string]Free, error)

// FreeSessions sums the nodes' free sessions by region. A draining node counts
// in Nodes and Draining but adds no sessions: it takes no new games. The map
// is never nil.
func FreeSessions(nodes []Load) map[string]Free {
	out := make(map[string]Free)
	for _, n := range nodes {
		f := out[n.Region]
		f.Nodes++
		if n.Draining {
			f.Draining++
		} else if room := n.Capacity - n.Games; room > 0 {
			f.Sessions += room
		}
		out[n.Region] = f
	}
	return out
}
