package arena

import "ludus.dev/ludus/sdk"

// Bot tuning.
const (
	botAimSlack   = 26                               // no turning once |cross|·26 < dot (≈ half a turn step)
	botFireSlack  = int64(sdk.FixedOne * 3 / 10)     // fire when the aim line passes within 0.3 cells
	botProbe      = sdk.Fixed(sdk.FixedOne * 8 / 10) // how far ahead a wandering bot looks for walls
	botCloseRange = int64(3 * sdk.FixedOne / 2)      // back off when closer than this
	botFarRange   = int64(4 * sdk.FixedOne)          // close in when farther than this
)

// botThink chooses bot i's buttons for this tick from the game state alone and
// feeds them through applyInput, the same path as a human's input payload.
// It uses the match's PRNG, so bots are as deterministic as everything else.
func (g *Game) botThink(i int) {
	s := &g.st
	p := &s.players[i]
	var in uint8

	p.botTimer--
	if p.botTimer <= 0 {
		p.botTimer = int32(s.rng.Range(20, 60))
		p.botTurn = 1
		if s.rng.Intn(2) == 0 {
			p.botTurn = -1
		}
		p.botStrafe = uint8(s.rng.Intn(3))
	}

	if p.alive {
		if t := g.nearestVisibleEnemy(i); t >= 0 {
			in = g.botFight(p, &s.players[t])
		} else {
			in = botWander(p)
		}
	}

	g.botBuf[0] = in
	g.applyInput(i, g.botBuf[:])
}

// botFight turns towards the target, fires when the aim is good, keeps a
// medium distance and strafes to dodge.
func (g *Game) botFight(p, t *player) uint8 {
	var in uint8
	c, s := int64(sdk.Cos(p.angle)), int64(sdk.Sin(p.angle))
	dx, dy := int64(t.x-p.x), int64(t.y-p.y)
	dot := (dx*c + dy*s) >> 16   // distance ahead
	cross := (dy*c - dx*s) >> 16 // distance to the right of the aim line
	if dot <= 0 || abs64(cross)*botAimSlack >= dot {
		if cross >= 0 {
			in |= BtnTurnRight
		} else {
			in |= BtnTurnLeft
		}
	}
	if dot > 0 && abs64(cross) < botFireSlack && p.cooldown == 0 && g.st.rng.Intn(4) != 0 {
		in |= BtnFire
	}
	dist2 := (dx*dx + dy*dy) >> 16
	switch {
	case dist2 > botFarRange*botFarRange>>16:
		in |= BtnForward
	case dist2 < botCloseRange*botCloseRange>>16:
		in |= BtnBack
	}
	switch p.botStrafe {
	case 1:
		in |= BtnStrafeLeft
	case 2:
		in |= BtnStrafeRight
	}
	return in
}

// botWander roams: forward until a wall is close, then turn the preferred way;
// now and then drift a little so bots do not walk the same loops forever.
func botWander(p *player) uint8 {
	px := p.x + botProbe.Mul(sdk.Cos(p.angle))
	py := p.y + botProbe.Mul(sdk.Sin(p.angle))
	turn := BtnTurnRight
	if p.botTurn < 0 {
		turn = BtnTurnLeft
	}
	if solid(px, py) {
		return turn
	}
	if p.botTimer%16 < 3 {
		return BtnForward | turn
	}
	return BtnForward
}

// nearestVisibleEnemy returns the closest living opponent in line of sight of
// player i, or -1.
func (g *Game) nearestVisibleEnemy(i int) int {
	s := &g.st
	p := &s.players[i]
	best, bestD := -1, int64(1)<<62
	for j := range s.players {
		q := &s.players[j]
		if j == i || !q.active || !q.alive {
			continue
		}
		dx, dy := int64(q.x-p.x), int64(q.y-p.y)
		d := dx*dx + dy*dy
		if d < bestD && lineOfSight(p.x, p.y, q.x, q.y) {
			best, bestD = j, d
		}
	}
	return best
}
