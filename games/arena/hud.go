package arena

import "ludus.dev/ludus/sdk"

// Overlays on the first-person view: weapon and muzzle flash, crosshair, hit
// marker, damage border and arrow, death screen, the HUD text and the kill
// feed.

var (
	white  = tone(rampGray, 15)
	yellow = tone(rampPlayer0+3, 15)
	red    = tone(rampPlayer0, 12)
)

func (r *Renderer) drawHUD(c canvas) {
	s := &r.s
	var buf [12]byte

	if s.alive {
		drawWeapon(c, s.flash)
		drawCrosshair(c)
		if s.hitLeft > 0 {
			drawHitMarker(c, s.hitKill)
		}
	} else {
		for k, v := range c {
			c[k] = redTint[v]
		}
		msg := "YOU DIED"
		shadowText(c, (ViewWidth-textWidth(len(msg), 3))/2, 60, msg, white, 3)
		x := (ViewWidth - textWidth(len("RESPAWNING IN 0"), 1)) / 2
		x = shadowText(c, x, 92, "RESPAWNING IN ", white, 1)
		shadowText(c, x, 92, itoa(&buf, s.respawnSecs), yellow, 1)
	}
	if s.hurt {
		c.fillRect(0, 0, ViewWidth, 3, red)
		c.fillRect(0, ViewHeight-3, ViewWidth, 3, red)
		c.fillRect(0, 0, 3, ViewHeight, red)
		c.fillRect(ViewWidth-3, 0, 3, ViewHeight, red)
	}
	if s.dmgLeft > 0 {
		drawDamageArrow(c, s.dmgFrom, s.angle, s.dmgLeft)
	}

	// Top left: own colour and frags. Top right: time left and the limit.
	c.fillRect(4, 4, 7, 7, tone(playerRamp(s.slot), 14))
	x := shadowText(c, 15, 4, "FRAGS ", white, 1)
	shadowText(c, x, 4, itoa(&buf, s.kills), yellow, 1)
	left := clock(&buf, s.secsLeft)
	shadowText(c, ViewWidth-4-textWidth(len(left), 1), 4, left, white, 1)
	limit := itoa(&buf, s.scoreLimit)
	x = ViewWidth - 4 - textWidth(len("LIMIT ")+len(limit), 1)
	x = shadowText(c, x, 14, "LIMIT ", white, 1)
	shadowText(c, x, 14, limit, white, 1)

	// Bottom left: health, big, with a bar. Bottom right: rank.
	hcol := tone(rampPlayer0+2, 14) // green
	switch {
	case s.health <= 25:
		hcol = red
	case s.health <= 50:
		hcol = yellow
	}
	x = shadowText(c, 4, ViewHeight-26, "HP", white, 1)
	shadowText(c, x+2, ViewHeight-30, itoa(&buf, int(s.health)), hcol, 2)
	c.fillRect(4, ViewHeight-10, 52, 6, 0)
	c.fillRect(5, ViewHeight-9, int(s.health)/2, 4, hcol)

	x = ViewWidth - 4 - textWidth(len("RANK 0/0"), 1)
	x = shadowText(c, x, ViewHeight-12, "RANK ", white, 1)
	x = shadowText(c, x, ViewHeight-12, itoa(&buf, s.rank), yellow, 1)
	x = shadowText(c, x, ViewHeight-12, "/", white, 1)
	shadowText(c, x, ViewHeight-12, itoa(&buf, s.count), white, 1)

	r.drawKillFeed(c)
	if s.ended {
		r.drawMatchOver(c)
	}
}

// drawMatchOver announces the end of the match and the winner.
func (r *Renderer) drawMatchOver(c canvas) {
	s := &r.s
	msg := "MATCH OVER"
	shadowText(c, (ViewWidth-textWidth(len(msg), 3))/2, 40, msg, yellow, 3)
	w := s.winner
	if w < 0 {
		return
	}
	if w == s.slot {
		msg = "YOU WIN!"
		shadowText(c, (ViewWidth-textWidth(len(msg), 2))/2, 120, msg, white, 2)
		return
	}
	name := cstr(s.winnerName[:])
	x := (ViewWidth - textWidth(len("WINNER ")+runeCount(name), 1)) / 2
	x = shadowText(c, x, 120, "WINNER ", white, 1)
	shadowText(c, x, 120, name, tone(playerRamp(w), 14), 1)
}

// drawWeapon draws the gun at the bottom centre, kicked down while firing,
// with a muzzle flash above it.
func drawWeapon(c canvas, flash int32) {
	kick := 0
	if flash > 0 {
		kick = 4
		r := 6 + 2*int(flash)
		cx, cy := ViewWidth/2, 150
		for dy := -r; dy <= r; dy++ {
			for dx := -r; dx <= r; dx++ {
				d2 := dx*dx + dy*dy
				// A round core plus four short spikes.
				if d2 <= r*r/2 || (dx == 0 || dy == 0 || dx == dy || dx == -dy) && d2 <= r*r {
					c.set(cx+dx, cy+dy, tone(rampFire, 15-d2*12/(r*r)))
				}
			}
		}
	}
	for y := 158; y < ViewHeight; y++ {
		half := 5 + (y-158)/3
		top := y + kick
		for dx := -half; dx <= half; dx++ {
			s := 9 - abs(dx)*6/half
			if dx < -half+2 || dx > half-2 {
				s = 3
			}
			c.set(ViewWidth/2+dx, top, tone(rampGray, s))
		}
	}
	c.fillRect(ViewWidth/2-2, 158+kick, 5, 3, tone(rampGray, 2)) // muzzle
}

func drawCrosshair(c canvas) {
	cx, cy := ViewWidth/2, horizon
	for d := 2; d <= 5; d++ {
		c.set(cx+d, cy, white)
		c.set(cx-d, cy, white)
		c.set(cx, cy+d, white)
		c.set(cx, cy-d, white)
	}
}

// drawHitMarker draws four short diagonal strokes around the crosshair: the
// viewer's shot hit someone (red when it killed).
func drawHitMarker(c canvas, killed bool) {
	col := white
	if killed {
		col = tone(rampPlayer0, 15)
	}
	cx, cy := ViewWidth/2, horizon
	for d := 3; d <= 7; d++ {
		for _, q := range [4][2]int{{1, 1}, {1, -1}, {-1, 1}, {-1, -1}} {
			x, y := cx+q[0]*d, cy+q[1]*d
			c.set(x, y+1, 0) // shadow
			c.set(x, y, col)
		}
	}
}

// Damage arrow geometry, in pixels: the tip's distance from the screen edge,
// the arrow's length and its half-width at the base.
const (
	arrowMargin = 5
	arrowLen    = 11
	arrowHalfW  = 9
)

// bayer4 is a 4×4 ordered-dither matrix (0..15): a pixel of the fading arrow
// is drawn while its entry is below the fraction of time left.
var bayer4 = [4][4]int32{{0, 8, 2, 10}, {12, 4, 14, 6}, {3, 11, 1, 9}, {15, 7, 13, 5}}

// drawDamageArrow draws a red arrow at the screen edge pointing towards the
// shooter (bearing from, seen from a viewer facing facing: straight up is
// ahead, the right edge is to the right), dithered away as left runs out.
func drawDamageArrow(c canvas, from uint8, facing sdk.Angle, left int32) {
	rel := sdk.Angle(from)<<8 - facing
	// The direction on screen as a 16.16 unit vector, x right and y down.
	ux, uy := int64(sdk.Sin(rel)), -int64(sdk.Cos(rel))
	// Where the ray from the crosshair meets the edge, inset by arrowMargin.
	hx, hy := int64(ViewWidth/2-arrowMargin), int64(horizon-arrowMargin)
	ax, ay := abs64(ux), abs64(uy)
	var dist int64 // pixels from the centre to the tip, 16.16
	if ax*hy >= ay*hx {
		dist = hx << 32 / ax
	} else {
		dist = hy << 32 / ay
	}
	fade := left * 16 // drawn where bayer4·damageDirTicks < fade
	fillArrow(c, ux, uy, dist+3<<15, arrowLen+3, arrowHalfW+2, 0, fade)
	fillArrow(c, ux, uy, dist, arrowLen, arrowHalfW, tone(rampPlayer0, 15), fade)
}

// fillArrow fills the triangle with its tip dist (16.16 pixels) from the
// crosshair along the unit vector (ux, uy), its base length pixels back
// towards the crosshair and halfW pixels wide on either side, with the
// dithered pixels of fade (see drawDamageArrow).
func fillArrow(c canvas, ux, uy, dist int64, length, halfW int, col byte, fade int32) {
	cx, cy := int64(ViewWidth/2)<<16, int64(horizon)<<16
	tx, ty := cx+ux*dist>>16, cy+uy*dist>>16
	bx, by := tx-ux*int64(length), ty-uy*int64(length)
	nx, ny := -uy*int64(halfW), ux*int64(halfW)
	v := [3][2]int64{{tx, ty}, {bx + nx, by + ny}, {bx - nx, by - ny}}
	x0, y0 := min(v[0][0], v[1][0], v[2][0])>>16, min(v[0][1], v[1][1], v[2][1])>>16
	x1, y1 := max(v[0][0], v[1][0], v[2][0])>>16, max(v[0][1], v[1][1], v[2][1])>>16
	for y := max(y0, 0); y <= min(y1, ViewHeight-1); y++ {
		for x := max(x0, 0); x <= min(x1, ViewWidth-1); x++ {
			if bayer4[y&3][x&3]*damageDirTicks >= fade {
				continue
			}
			px, py := x<<16+1<<15, y<<16+1<<15 // the pixel's centre
			var pos, neg bool
			for i := range v {
				a, b := v[i], v[(i+1)%3]
				e := (b[0]-a[0])*(py-a[1]) - (b[1]-a[1])*(px-a[0])
				pos, neg = pos || e > 0, neg || e < 0
			}
			if !(pos && neg) {
				c[int(y)*ViewWidth+int(x)] = col
			}
		}
	}
}

// Kill feed layout: the top right corner, under the clock and the limit.
const (
	feedTop  = 26
	feedLine = glyphH + 4
	feedSepW = 12 // the ▸ between the two names
)

// drawKillFeed lists the recent kills, newest first, "KILLER ▸ VICTIM" in
// the players' colours, right-aligned; kills the viewer took part in are
// on a dark band.
func (r *Renderer) drawKillFeed(c canvas) {
	s := &r.s
	y := feedTop
	for i := range s.feed[:s.feedSize] {
		k := &s.feed[i]
		kn, vn := cstr(k.killerName[:]), cstr(k.victimName[:])
		w := textWidth(runeCount(kn)+runeCount(vn), 1) + feedSepW
		x := ViewWidth - 4 - w
		if int(k.killer) == s.slot || int(k.victim) == s.slot {
			c.fillRect(x-3, y-2, w+5, feedLine, tone(rampGray, 2))
		}
		x = shadowText(c, x, y, kn, tone(playerRamp(int(k.killer)), 14), 1)
		for d := 0; d < 4; d++ { // ▸, with a shadow
			c.fillRect(x+3+d+1, y+d+1, 1, glyphH-2*d, 0)
			c.fillRect(x+3+d, y+d, 1, glyphH-2*d, white)
		}
		shadowText(c, x+feedSepW, y, vn, tone(playerRamp(int(k.victim)), 14), 1)
		y += feedLine
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
