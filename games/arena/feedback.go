package arena

import "ludus.dev/ludus/sdk"

// Combat feedback (issue 16): a hit marker at the crosshair when the viewer's
// shot hits, an arrow at the screen edge pointing to whoever hit the viewer,
// and a kill feed. All three are game state, recorded as events with the tick
// they happened (player.hitTick, player.dmgTick, state.feed), so they are
// hashed, checkpointed and replayed like everything else; snapshots carry what
// is still showing (snapshot.go), and the renderer draws it (hud.go), so pixel
// and snapshot clients see the same pictures.
const (
	hitMarkerTicks = 10           // ≈0.3 s
	damageDirTicks = TickRate     // 1 s, fading
	killFeedTicks  = 4 * TickRate // each kill stays 4 s
	feedLen        = 4            // kills in the feed, newest first
	feedNameLen    = 8            // characters of a name in the feed
)

// kill is one entry of the kill feed. The names are kept as drawn (putName),
// taken when the kill happened, so a player leaving or a slot changing hands
// does not rename an entry.
type kill struct {
	tick           int64 // 0: no entry
	killer, victim uint8 // slots, for the colours
	killerName     [feedNameLen]byte
	victimName     [feedNameLen]byte
}

// ticksLeft is how many ticks an event of tick t shows for, out of dur, at
// tick now: dur at the tick it happened, then one less every tick; 0 once
// over or when t is 0 (no event).
func ticksLeft(now, t int64, dur int32) int32 {
	if t <= 0 || now-t >= int64(dur) || now < t {
		return 0
	}
	return dur - int32(now-t)
}

// recordHit notes that shooter's shot hit victim this tick (killed: it was
// the fatal one), for the hit marker, the damage arrow and the kill feed.
func (s *state) recordHit(shooter, victim int, killed bool) {
	sh, v := &s.players[shooter], &s.players[victim]
	sh.hitTick, sh.hitKill = s.tick, killed
	v.dmgTick, v.dmgFrom = s.tick, bearing(v.x, v.y, sh.x, sh.y)
	if !killed {
		return
	}
	copy(s.feed[1:], s.feed[:feedLen-1])
	k := kill{tick: s.tick, killer: uint8(shooter), victim: uint8(victim)}
	putName(k.killerName[:], sh.name)
	putName(k.victimName[:], v.name)
	s.feed[0] = k
}

// bearing is the direction from (x0, y0) to (x1, y1) in 256ths of a turn, in
// the orientation of sdk.Angle (0 is +x, a quarter turn is +y): of the 256
// directions, the one whose unit vector has the largest dot product with the
// offset (the first on a tie). Integer maths over the SDK's sine table, so it
// is the same everywhere; it runs once per hit.
func bearing(x0, y0, x1, y1 sdk.Fixed) uint8 {
	dx, dy := int64(x1-x0), int64(y1-y0)
	best, bestDot := 0, int64(-1)<<62
	for k := 0; k < 256; k++ {
		a := sdk.Angle(k << 8)
		if d := dx*int64(sdk.Cos(a)) + dy*int64(sdk.Sin(a)); d > bestDot {
			best, bestDot = k, d
		}
	}
	return uint8(best)
}

// validName reports whether b could be a name as putName writes it: ASCII
// without NUL, then zeros.
func validName(b []byte) bool {
	n := len(cstr(b))
	for i, c := range b {
		if i < n && c >= 0x80 || i >= n && c != 0 {
			return false
		}
	}
	return true
}
