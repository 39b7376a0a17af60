package arena

// Overlays on the first-person view: weapon and muzzle flash, crosshair,
// damage border, death screen and the HUD text.

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

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
