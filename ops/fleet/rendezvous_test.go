package fleet

import (
	"fmt"
	"math"
	"testing"
)

func testNodes(n, capacity int) []NodeInfo {
	nodes := make([]NodeInfo, n)
	for i := range nodes {
		nodes[i] = NodeInfo{ID: fmt.Sprintf("node-%d", i+1), Addr: "http://x", Capacity: capacity, Region: "local"}
	}
	return nodes
}

func firstChoices(nodes []NodeInfo, keys int, opts RankOptions) map[string]string {
	out := map[string]string{}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("game-%06d", k)
		if r := Rank(nodes, key, opts); len(r) > 0 {
			out[key] = r[0].ID
		}
	}
	return out
}

// Equal nodes each get their share of games, within a few percent.
func TestRankSpreadsEvenly(t *testing.T) {
	const keys = 60000
	for n := 3; n <= 10; n++ {
		counts := map[string]int{}
		for _, node := range firstChoices(testNodes(n, 64), keys, RankOptions{}) {
			counts[node]++
		}
		want := float64(keys) / float64(n)
		for id, c := range counts {
			if dev := math.Abs(float64(c)-want) / want; dev > 0.03 {
				t.Fatalf("%d nodes: %s got %d games, %.1f%% off its share %.0f", n, id, c, 100*dev, want)
			}
		}
		if len(counts) != n {
			t.Fatalf("%d nodes: only %d got games", n, len(counts))
		}
	}
}

// Free capacity weights the choice: a node with twice the free slots comes
// first about twice as often.
func TestRankWeightsByFreeCapacity(t *testing.T) {
	nodes := testNodes(2, 64)
	nodes[1].Games = 32 // half full: half the weight
	counts := map[string]int{}
	for _, node := range firstChoices(nodes, 30000, RankOptions{}) {
		counts[node]++
	}
	ratio := float64(counts["node-1"]) / float64(counts["node-2"])
	if math.Abs(ratio-2) > 0.1 {
		t.Fatalf("free 64 vs 32 chosen %d vs %d times (ratio %.2f, want 2)", counts["node-1"], counts["node-2"], ratio)
	}
}

// Adding or removing a node moves only the keys whose first choice it is.
func TestRankMovesOnlyTheChangedNodesShare(t *testing.T) {
	for n := 3; n <= 10; n++ {
		nodes := testNodes(n+1, 64)
		before := firstChoices(nodes[:n], 20000, RankOptions{})
		after := firstChoices(nodes, 20000, RankOptions{}) // node n+1 joins
		moved := 0
		for k, was := range before {
			if now := after[k]; now != was {
				if now != nodes[n].ID {
					t.Fatalf("%d→%d nodes: %s moved from %s to %s, not to the new node", n, n+1, k, was, now)
				}
				moved++
			}
		}
		share := 20000.0 / float64(n+1)
		if math.Abs(float64(moved)-share)/share > 0.06 {
			t.Fatalf("%d→%d nodes: %d keys moved, want about %.0f", n, n+1, moved, share)
		}
		// And removing it again moves exactly those back.
		if again := firstChoices(nodes[:n], 20000, RankOptions{}); fmt.Sprint(again) != fmt.Sprint(before) {
			t.Fatalf("%d nodes: removing the node did not restore the assignment", n)
		}
	}
}

// Draining, full, addressless and excluded nodes are never ranked; the region
// comes first with the rest as fallback.
func TestRankFiltersAndRegions(t *testing.T) {
	nodes := testNodes(6, 4)
	nodes[0].Draining = true
	nodes[1].Games = 4
	nodes[2].Addr = ""
	nodes[4].Region = "eu"
	nodes[5].Region = "eu"
	r := Rank(nodes, "g", RankOptions{Exclude: "node-4", Region: "eu"})
	if len(r) != 2 || r[0].Region != "eu" || r[1].Region != "eu" {
		t.Fatalf("ranked %v", r)
	}
	r = Rank(nodes, "g", RankOptions{Region: "eu"})
	if len(r) != 3 || r[2].ID != "node-4" {
		t.Fatalf("with a fallback outside the region: %v", r)
	}
	if len(Rank(nodes, "g", RankOptions{Region: "us"})) != 3 {
		t.Fatal("no node in the region: every eligible node must still be ranked")
	}
}
