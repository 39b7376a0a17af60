package arena

import "ludus.dev/ludus/sdk"

// Map size in cells. The border is solid, so rays and players never leave it.
const (
	mapW = 24
	mapH = 24
)

// Wall tiles. 0 is open floor; the others pick a wall texture.
const (
	tileOpen  = 0
	tileBrick = 1
	tileStone = 2
	tileMetal = 3
	tileWood  = 4
	numTiles  = 5
)

// levelRows is the map, top row first: '.' floor, 1 brick, 2 stone, 3 metal,
// 4 wood. Four rooms around an open hall with pillars, connected by doors.
var levelRows = [mapH]string{
	"222222222222222222222222",
	"2.......4......3.......2",
	"2.......4......3.......2",
	"2..1.1..4..22..3..3.3..2",
	"2..............3.......2",
	"2..1.1..4......3..3.3..2",
	"2.......4..22..........2",
	"2.......4......3.......2",
	"2444.4444......3333.3332",
	"2......................2",
	"2...3......1..1....4...2",
	"2......................2",
	"2.....2....1..1........2",
	"2...........11.....2...2",
	"2...4..................2",
	"21111.111..3..3..111.112",
	"2.....1..............1.2",
	"2.....1..4....4..1...1.2",
	"2..3..1..............1.2",
	"2...........44.......1.2",
	"2..3..1..............1.2",
	"2.....1..4....4..1.....2",
	"2.....1..............1.2",
	"222222222222222222222222",
}

// level holds the tiles row-major, built from levelRows at package init.
var level = buildLevel()

func buildLevel() (l [mapW * mapH]byte) {
	for y, row := range levelRows {
		for x := 0; x < mapW; x++ {
			if c := row[x]; c >= '1' && c <= '4' {
				l[y*mapW+x] = c - '0'
			}
		}
	}
	return l
}

// tileAt returns the tile of cell (cx, cy); outside the map is solid stone.
func tileAt(cx, cy int) byte {
	if cx < 0 || cy < 0 || cx >= mapW || cy >= mapH {
		return tileStone
	}
	return level[cy*mapW+cx]
}

// solid reports whether the point (x, y) lies in a wall.
func solid(x, y sdk.Fixed) bool { return tileAt(x.Int(), y.Int()) != tileOpen }

// blocked reports whether a player centred at (x, y) would overlap a wall
// (players are squares of half-width playerRadius, which is plenty at 0.1
// cell per tick).
func blocked(x, y sdk.Fixed) bool {
	r := playerRadius
	return solid(x-r, y-r) || solid(x+r, y-r) || solid(x-r, y+r) || solid(x+r, y+r)
}

// spawnPoint is a cell to (re)spawn in and the direction to face there.
type spawnPoint struct {
	cx, cy int
	deg    int
}

// spawnPoints are spread over every room and the hall.
var spawnPoints = [...]spawnPoint{
	{1, 1, 45}, {6, 6, 315}, {11, 1, 90}, {13, 4, 180},
	{22, 1, 135}, {17, 6, 200}, {1, 9, 0}, {22, 9, 180},
	{8, 11, 90}, {16, 13, 270}, {1, 13, 0}, {22, 14, 180},
	{3, 17, 0}, {8, 20, 300}, {19, 18, 180}, {22, 22, 225},
}

// spawn puts player i at the spawn point farthest from every other living
// player (ties broken from a random starting point), alive and at full health.
func (s *state) spawn(i int) {
	n := len(spawnPoints)
	start := s.rng.Intn(n)
	best, bestD := start, int64(-1)
	for k := 0; k < n; k++ {
		si := (start + k) % n
		sx, sy := cellCenter(spawnPoints[si].cx), cellCenter(spawnPoints[si].cy)
		d := int64(1) << 62 // nobody around: every point is equally good
		for j := range s.players {
			q := &s.players[j]
			if j == i || !q.active || !q.alive {
				continue
			}
			dx, dy := int64(q.x-sx), int64(q.y-sy)
			d = min(d, dx*dx+dy*dy)
		}
		if d > bestD {
			best, bestD = si, d
		}
	}
	sp := spawnPoints[best]
	p := &s.players[i]
	p.x, p.y = cellCenter(sp.cx), cellCenter(sp.cy)
	p.angle = sdk.AngleDegrees(sp.deg)
	p.health = maxHealth
	p.alive = true
	p.respawn = 0
	p.cooldown = 0
	p.aimOwed = 0 // a new life faces the spawn point's way
}

// cellCenter returns the fixed-point coordinate of the middle of cell c.
func cellCenter(c int) sdk.Fixed { return sdk.FixedInt(c) + sdk.FixedHalf }
