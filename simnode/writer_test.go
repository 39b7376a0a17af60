package simnode

import (
	"testing"

	"ludus.dev/ludus/clusterstate"
)

// A round's transaction holds one append per game, at most gamesPerTxn, and
// at most clusterstate.MaxAppendBytesPerTxn bytes; what does not fit waits,
// in order, and a lone append larger than the bound still goes.
func TestNextGroupBoundsOpsAndBytes(t *testing.T) {
	req := func(g *game, checkpoint int) *appendReq {
		return &appendReq{g: g, encoded: &clusterstate.Append{Chunk: make([]byte, 100), Checkpoint: make([]byte, checkpoint)}}
	}
	games := make([]*game, 40)
	for i := range games {
		games[i] = new(game)
	}
	check := func(name string, batch []*appendReq, wantNow ...int) []*appendReq {
		t.Helper()
		now, later := nextGroup(batch)
		bytes := 0
		for _, r := range now {
			bytes += r.append().Size()
		}
		if len(now) > 1 && bytes > clusterstate.MaxAppendBytesPerTxn {
			t.Errorf("%s: a group of %d appends and %d bytes", name, len(now), bytes)
		}
		var got []int
		for _, r := range now {
			for i, b := range batch {
				if b == r {
					got = append(got, i)
				}
			}
		}
		if len(got) != len(wantNow) {
			t.Fatalf("%s: group %v, want %v", name, got, wantNow)
		}
		for i := range got {
			if got[i] != wantNow[i] {
				t.Fatalf("%s: group %v, want %v", name, got, wantNow)
			}
		}
		if len(now)+len(later) != len(batch) {
			t.Fatalf("%s: %d + %d appends of %d", name, len(now), len(later), len(batch))
		}
		return later
	}

	// Three games checkpointing at once (512 KiB each): two fit, the third waits.
	batch := []*appendReq{req(games[0], 512<<10), req(games[1], 512<<10-8<<10), req(games[2], 512<<10)}
	later := check("checkpoints", batch, 0, 1)
	later = check("checkpoints, second round", later, 0)
	if len(later) != 0 {
		t.Fatalf("third round left %d", len(later))
	}
	// A lone append over the bound goes alone.
	check("oversized", []*appendReq{req(games[0], 2<<20), req(games[1], 0)}, 0)
	// One append per game: a game's second chunk waits for the next round.
	check("per game", []*appendReq{req(games[0], 0), req(games[0], 0), req(games[1], 0)}, 0, 2)
	// At most gamesPerTxn small appends.
	var many []*appendReq
	for _, g := range games {
		many = append(many, req(g, 0))
	}
	want := make([]int, gamesPerTxn)
	for i := range want {
		want[i] = i
	}
	check("many", many, want...)
}
