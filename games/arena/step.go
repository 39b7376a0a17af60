package arena

import "ludus.dev/ludus/sdk"

// Step advances the match by one tick: bots choose their input, every living
// player turns and moves, then all triggers pulled this tick are resolved
// against the same positions, then the end conditions are checked. Once the
// match has ended Step does nothing and keeps returning true.
func (g *Game) Step() bool {
	s := &g.st
	if s.ended {
		return true
	}
	s.tick++

	for i := range s.players {
		if p := &s.players[i]; p.active && p.bot {
			g.botThink(i)
		}
	}

	for i := range s.players {
		p := &s.players[i]
		if !p.active {
			continue
		}
		p.flash = max(p.flash-1, 0)
		p.hurt = max(p.hurt-1, 0)
		p.cooldown = max(p.cooldown-1, 0)
		if !p.alive {
			if p.respawn--; p.respawn <= 0 {
				s.spawn(i)
			}
			continue
		}
		move(p)
	}

	g.shoot()

	for i := range s.players {
		if p := &s.players[i]; p.active && p.kills >= s.scoreLimit {
			s.ended = true
		}
	}
	if s.tick >= int64(s.timeLimit) {
		s.ended = true
	}
	return s.ended
}

// move turns and moves a living player according to its held buttons and the
// turn owed to its mouse. Opposite buttons cancel out. Keys and mouse share
// one budget of turnSpeed per tick, so no way of turning is faster than
// another.
func move(p *player) {
	in := p.input
	var turn int32
	if in&BtnTurnLeft != 0 {
		turn -= int32(turnSpeed)
	}
	if in&BtnTurnRight != 0 {
		turn += int32(turnSpeed)
	}
	if p.aimOwed != 0 {
		step := clamp32(p.aimOwed, -int32(turnSpeed)-turn, int32(turnSpeed)-turn)
		p.aimOwed -= step
		turn += step
	}
	p.angle += sdk.Angle(turn) // modulo a full turn, as the keys always turned
	var fwd, side sdk.Fixed
	if in&BtnForward != 0 {
		fwd += moveSpeed
	}
	if in&BtnBack != 0 {
		fwd -= moveSpeed
	}
	if in&BtnStrafeRight != 0 {
		side += strafeSpeed
	}
	if in&BtnStrafeLeft != 0 {
		side -= strafeSpeed
	}
	if fwd == 0 && side == 0 {
		return
	}
	// Forward is (cos, sin); right is forward turned a quarter towards +y,
	// (-sin, cos), since the map's y axis points "down".
	c, s := sdk.Cos(p.angle), sdk.Sin(p.angle)
	dx := fwd.Mul(c) - side.Mul(s)
	dy := fwd.Mul(s) + side.Mul(c)
	// Move each axis separately so players slide along walls.
	if !blocked(p.x+dx, p.y) {
		p.x += dx
	}
	if !blocked(p.x, p.y+dy) {
		p.y += dy
	}
}

// shoot fires every ready gun whose trigger is held. Hits are found for all
// shooters first and applied afterwards, so two players can kill each other in
// the same tick and the slot order gives nobody an edge.
func (g *Game) shoot() {
	s := &g.st
	n := 0
	for i := range s.players {
		p := &s.players[i]
		if !p.active || !p.alive || p.input&BtnFire == 0 || p.cooldown > 0 {
			continue
		}
		target, dist := g.hitscan(i)
		p.cooldown = fireCooldown
		p.flash = flashTicks
		p.shotX = p.x + sdk.Fixed(dist*int64(sdk.Cos(p.angle))>>16)
		p.shotY = p.y + sdk.Fixed(dist*int64(sdk.Sin(p.angle))>>16)
		var dmg int32
		if target >= 0 {
			dmg = int32(s.rng.Range(damageMin, damageMax))
		}
		g.shots[n] = shot{shooter: i, target: target, damage: dmg}
		n++
	}
	for _, sh := range g.shots[:n] {
		if sh.target < 0 {
			continue
		}
		v := &s.players[sh.target]
		if !v.alive {
			continue // already killed by an earlier shot this tick
		}
		v.health -= sh.damage
		v.hurt = hurtTicks
		killed := v.health <= 0
		if killed {
			v.health = 0
			v.alive = false
			v.aimOwed = 0 // a dead player owes its mouse nothing (takeAim: nor while dead)
			v.respawn = respawnTicks
			v.deaths++
			s.players[sh.shooter].kills++
		}
		s.recordHit(sh.shooter, sh.target, killed)
	}
}

// hitscan traces player i's shot and returns the nearest living player within
// hitRadius of the line before the first wall (or -1), and how far the shot went.
func (g *Game) hitscan(i int) (target int, dist int64) {
	s := &g.st
	p := &s.players[i]
	c, sn := int64(sdk.Cos(p.angle)), int64(sdk.Sin(p.angle))
	wall, _, _ := castRay(p.x, p.y, c, sn)
	target, dist = -1, wall
	for j := range s.players {
		q := &s.players[j]
		if j == i || !q.active || !q.alive {
			continue
		}
		dx, dy := int64(q.x-p.x), int64(q.y-p.y)
		along := (dx*c + dy*sn) >> 16
		if along <= 0 || along >= dist {
			continue
		}
		if lateral := abs64(dy*c-dx*sn) >> 16; lateral < int64(hitRadius) {
			target, dist = j, along
		}
	}
	return target, dist
}
