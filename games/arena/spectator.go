package arena

import "ludus.dev/ludus/sdk"

// The spectator view is a top-down map (8 pixels per cell) with every player as
// a coloured disc with a facing line, shot tracers, and a score panel on the
// right listing players in the same colours.
const (
	cellPx  = 8
	mapOffX = 4
	mapOffY = 4
	panelX  = mapOffX + mapW*cellPx + 8
)

// spectatorBackground is the static part (map and panel), built once.
var spectatorBackground = buildSpectatorBackground()

func buildSpectatorBackground() *[ViewWidth * ViewHeight]byte {
	var bg [ViewWidth * ViewHeight]byte
	c := canvas(bg[:])
	c.fillRect(0, 0, ViewWidth, ViewHeight, tone(rampGray, 1))
	wallRamp := [numTiles]int{tileBrick: rampBrick, tileStone: rampStone, tileMetal: rampMetal, tileWood: rampWood}
	for cy := 0; cy < mapH; cy++ {
		for cx := 0; cx < mapW; cx++ {
			x, y := mapOffX+cx*cellPx, mapOffY+cy*cellPx
			if t := tileAt(cx, cy); t != tileOpen {
				c.fillRect(x, y, cellPx, cellPx, tone(wallRamp[t], 6))
				c.fillRect(x+1, y+1, cellPx-2, cellPx-2, tone(wallRamp[t], 10))
				continue
			}
			c.fillRect(x, y, cellPx, cellPx, tone(rampFloor, 4))
			c.set(x, y, tone(rampFloor, 6))
		}
	}
	c.fillRect(panelX-4, 0, ViewWidth-panelX+4, ViewHeight, tone(rampGray, 2))
	text(c, panelX, 4, "ARENA", yellow, 2)
	return &bg
}

// mapPx converts a map coordinate to a spectator-view pixel coordinate.
func mapPx(v sdk.Fixed, off int) int { return off + int(int64(v)*cellPx>>16) }

func (r *Renderer) renderSpectator(c canvas) {
	s := &r.s
	copy(c, spectatorBackground[:])
	var buf [12]byte

	for i := range s.ents {
		p := &s.ents[i]
		if !p.on || !p.shot {
			continue
		}
		c.line(mapPx(p.x, mapOffX), mapPx(p.y, mapOffY), mapPx(p.shotX, mapOffX), mapPx(p.shotY, mapOffY), tone(rampFire, 14))
	}
	for i := range s.ents {
		p := &s.ents[i]
		if !p.on {
			continue
		}
		x, y := mapPx(p.x, mapOffX), mapPx(p.y, mapOffY)
		if !p.alive {
			col := tone(playerRamp(i), 8)
			c.line(x-2, y-2, x+2, y+2, col)
			c.line(x-2, y+2, x+2, y-2, col)
			continue
		}
		for dy := -3; dy <= 3; dy++ {
			for dx := -3; dx <= 3; dx++ {
				if dx*dx+dy*dy <= 10 {
					c.set(x+dx, y+dy, tone(playerRamp(i), 14))
				}
			}
		}
		fx := x + int(int64(sdk.Cos(p.angle))*7>>16)
		fy := y + int(int64(sdk.Sin(p.angle))*7>>16)
		c.line(x, y, fx, fy, white)
	}

	// Panel: time left, limit, then one line per player.
	left := clock(&buf, s.secsLeft)
	x := text(c, panelX, 24, "TIME ", white, 1)
	text(c, x, 24, left, white, 1)
	x = text(c, panelX, 34, "LIMIT ", white, 1)
	text(c, x, 34, itoa(&buf, s.scoreLimit), white, 1)
	y := 50
	for i := range s.ents {
		p := &s.ents[i]
		if !p.on {
			continue
		}
		c.fillRect(panelX, y, 7, 7, tone(playerRamp(i), 14))
		nameCol := white
		if !p.alive {
			nameCol = tone(rampGray, 8)
		}
		text(c, panelX+10, y, cstr(p.name[:]), nameCol, 1)
		score := itoa(&buf, p.kills)
		text(c, ViewWidth-4-textWidth(len(score), 1), y, score, yellow, 1)
		y += 12
	}
	if s.ended {
		text(c, panelX, ViewHeight-30, "MATCH OVER", yellow, 1)
		if w := s.winner; w >= 0 {
			c.fillRect(panelX, ViewHeight-18, 7, 7, tone(playerRamp(w), 14))
			text(c, panelX+10, ViewHeight-18, cstr(s.ents[w].name[:]), white, 1)
		}
	}
}
