package arena

import "testing"

// TestLevel checks the map's shape: a closed border, every open cell reachable
// from every other, and spawn points on open floor.
func TestLevel(t *testing.T) {
	for y, row := range levelRows {
		if len(row) != mapW {
			t.Fatalf("row %d has %d cells, want %d", y, len(row), mapW)
		}
		for x := 0; x < mapW; x++ {
			border := x == 0 || y == 0 || x == mapW-1 || y == mapH-1
			if border && tileAt(x, y) == tileOpen {
				t.Errorf("border cell (%d,%d) is open", x, y)
			}
		}
	}
	open := 0
	for _, c := range level {
		if c == tileOpen {
			open++
		}
	}
	sp := spawnPoints[0]
	seen := map[[2]int]bool{{sp.cx, sp.cy}: true}
	queue := [][2]int{{sp.cx, sp.cy}}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, d := range [][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
			n := [2]int{c[0] + d[0], c[1] + d[1]}
			if tileAt(n[0], n[1]) == tileOpen && !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	if len(seen) != open {
		t.Errorf("%d of %d open cells reachable from the first spawn point", len(seen), open)
	}
	for i, sp := range spawnPoints {
		if tileAt(sp.cx, sp.cy) != tileOpen {
			t.Errorf("spawn point %d (%d,%d) is in a wall", i, sp.cx, sp.cy)
		}
		if blocked(cellCenter(sp.cx), cellCenter(sp.cy)) {
			t.Errorf("spawn point %d is blocked", i)
		}
	}
}
