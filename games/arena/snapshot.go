package arena

import (
	"encoding/binary"

	"ludus.dev/ludus/sdk"
)

// Snapshots (docs/ABI.md, "Snapshots and ludus_render"). View does not draw:
// it returns a small fixed-layout snapshot of what one viewer may know, and
// Render (renderer.go) — run by the browser or, for thin clients, by the node —
// draws it into the indexed8 frame. A player snapshot holds the viewer's own
// position, facing and HUD numbers, and only the other players whose sprite
// would cover at least one screen column not hidden by a wall (visibleFrom):
// a player behind a wall is not in it, so a hacked client cannot show it. The
// spectator snapshot holds every player (spectators see everything).
//
// Every field has a fixed position, unused entries are zero and integers are
// little-endian, so consecutive snapshots of a stream differ in few bytes
// and the platform's XOR-delta codec compresses them well.
//
// Player snapshot, SnapshotPlayerSize bytes:
//
//	off len field
//	  0   4 magic "ARS1"
//	  4   1 kind: 1 (player)
//	  5   1 the viewer's slot
//	  6  72 kill feed: the kills of the last 4 s, newest first, at most 4, each
//	        +0 killer's slot + 1 (0: no entry; later entries are zero too)
//	        +1 victim's slot
//	        +2 killer's name, +10 victim's name (8 bytes each, as drawn)
//	 78   1 flags: 1 alive, 2 hurt (damage border), 4 match over
//	 79   1 muzzle flash ticks left (0..3)
//	 80   1 health (0..100)
//	 81   1 seconds until respawn, rounded up (while dead)
//	 82   1 rank (1 + players with more kills)
//	 83   1 players in the match
//	 84   4 kills (u32)
//	 88   4 seconds left (u32)
//	 92   2 score limit (u16)
//	 94   1 winner's slot once the match is over, else 0xFF
//	 95   1 hit marker: ticks left (1..10) while the viewer's last hit shows,
//	        plus 0x80 if it killed; 0: none
//	 96   4 x (i32, 16.16 map cells)
//	100   4 y (i32)
//	104   2 facing (sdk.Angle)
//	106   1 damage arrow: ticks left (1..35) since the viewer was last hit; 0: none
//	107   1 bearing from the viewer to that shooter when it hit, 256ths of a
//	        turn (sdk.Angle>>8, absolute: the renderer turns it by the facing);
//	        zero without an arrow
//	108  16 winner's name once the match is over (as drawn, see putName)
//	124  72 8 × other player by slot: flags (1 visible, 2 alive), x i32, y i32
//
// The combat feedback fields (the feed, 95, 106, 107) are zero unless
// something happened, and cost nothing in the delta codec then. The feed
// comes first so that the fields that change every tick (clock, position,
// other players) lie past offset 68: the codec codes runs of unchanged bytes
// as varints, and this keeps the runs before and after them under 128 bytes,
// one byte each.
//
// Spectator snapshot, SnapshotSpectatorSize bytes:
//
//	off len field
//	  0   4 magic "ARS1"
//	  4   1 kind: 2 (spectator)
//	  5   1 flags: 4 match over
//	  6   1 winner's slot once the match is over, else 0xFF
//	  7   1 zero
//	  8   4 seconds left (u32)
//	 12   2 score limit (u16)
//	 14   2 zero
//	 16 272 8 × player by slot, 34 bytes each:
//	        +0 flags: 1 in the match, 2 alive, 4 shot tracer
//	        +1 zero
//	        +2 facing (sdk.Angle)
//	        +4 x, +8 y (i32)
//	        +12 shot end x, +16 shot end y (i32; zero without a tracer)
//	        +20 kills (u32)
//	        +24 name (10 bytes, as drawn)
const (
	// SnapshotFormat is the arena's Meta.SnapshotFormat.
	SnapshotFormat = "arena-snap-v1"
	// SnapshotPlayerSize and SnapshotSpectatorSize are the fixed sizes of the
	// two kinds of snapshot.
	SnapshotPlayerSize    = snapEnts + MaxPlayers*snapEntSize
	SnapshotSpectatorSize = specEnts + MaxPlayers*specEntSize

	snapMagic         = "ARS1"
	snapKindPlayer    = 1
	snapKindSpectator = 2

	snapAlive = 1
	snapHurt  = 2
	snapEnded = 4

	entVisible = 1
	entAlive   = 2
	entActive  = 1
	entShot    = 4

	noWinner = 0xFF

	winnerNameLen = 16 // characters of the winner's name in the HUD
	specNameLen   = 10 // characters of a name in the spectator panel

	// Player snapshot offsets.
	snapFeed       = 6
	snapKillSize   = 2 + 2*feedNameLen
	snapFlags      = snapFeed + feedLen*snapKillSize
	snapFlash      = snapFlags + 1
	snapHealth     = snapFlags + 2
	snapRespawn    = snapFlags + 3
	snapRank       = snapFlags + 4
	snapCount      = snapFlags + 5
	snapKills      = snapFlags + 6
	snapSecs       = snapKills + 4
	snapLimit      = snapSecs + 4
	snapWinner     = snapLimit + 2
	snapHit        = snapWinner + 1
	snapX          = snapHit + 1
	snapY          = snapX + 4
	snapFacing     = snapY + 4
	snapDmg        = snapFacing + 2
	snapDmgFrom    = snapDmg + 1
	snapWinnerName = snapDmgFrom + 1
	snapEnts       = snapWinnerName + winnerNameLen
	snapEntSize    = 9
	snapHitKill    = 0x80 // in the hit marker byte: the hit killed
	specEnts       = 16
	specEntSize    = 34
)

var le = binary.LittleEndian

// View returns slot's player snapshot, or the spectator snapshot for
// abi.SpectatorSlot and for slots nobody holds. It only reads the state.
//
// The returned slice is the game's snapshot buffer, reused by the next call:
// copy it to keep it. It does not allocate.
func (g *Game) View(slot int) []byte {
	if slot >= 0 && slot < MaxPlayers && g.st.players[slot].active {
		return g.playerSnapshot(slot)
	}
	return g.spectatorSnapshot()
}

// secondsLeft is the match clock the HUD shows, in whole seconds.
func (s *state) secondsLeft() uint32 {
	return uint32(max(int64(s.timeLimit)-s.tick, 0) / TickRate)
}

// matchWinner is the winner's slot once the match is over, else noWinner.
func (s *state) matchWinner() byte {
	if w := s.winner(); s.ended && w >= 0 {
		return byte(w)
	}
	return noWinner
}

func (g *Game) playerSnapshot(i int) []byte {
	s := &g.st
	p := &s.players[i]
	b := g.snap[:SnapshotPlayerSize]
	clear(b)
	copy(b, snapMagic)
	b[4] = snapKindPlayer
	b[5] = byte(i)
	var flags byte
	if p.alive {
		flags |= snapAlive
	}
	if p.hurt > 0 {
		flags |= snapHurt
	}
	if s.ended {
		flags |= snapEnded
	}
	b[snapFlags] = flags
	b[snapFlash] = byte(clamp32(p.flash, 0, 255))
	b[snapHealth] = byte(clamp32(p.health, 0, 255))
	b[snapRespawn] = byte(clamp32((p.respawn+TickRate-1)/TickRate, 0, 255))
	rank, n := 1, 0
	for j := range s.players {
		if q := &s.players[j]; q.active {
			n++
			if q.kills > p.kills {
				rank++
			}
		}
	}
	b[snapRank], b[snapCount] = byte(rank), byte(n)
	le.PutUint32(b[snapKills:], uint32(max(p.kills, 0)))
	le.PutUint32(b[snapSecs:], s.secondsLeft())
	le.PutUint16(b[snapLimit:], uint16(s.scoreLimit))
	w := s.matchWinner()
	b[snapWinner] = w
	if left := ticksLeft(s.tick, p.hitTick, hitMarkerTicks); left > 0 {
		b[snapHit] = byte(left)
		if p.hitKill {
			b[snapHit] |= snapHitKill
		}
	}
	le.PutUint32(b[snapX:], uint32(p.x))
	le.PutUint32(b[snapY:], uint32(p.y))
	le.PutUint16(b[snapFacing:], uint16(p.angle))
	if left := ticksLeft(s.tick, p.dmgTick, damageDirTicks); left > 0 {
		b[snapDmg], b[snapDmgFrom] = byte(left), p.dmgFrom
	}
	if w != noWinner {
		putName(b[snapWinnerName:snapWinnerName+winnerNameLen], s.players[w].name)
	}
	cam := newCamera(p.x, p.y, p.angle)
	for j := range s.players {
		q := &s.players[j]
		if j == i || !q.active || !visibleFrom(&cam, q.x, q.y) {
			continue
		}
		e := b[snapEnts+j*snapEntSize:]
		e[0] = entVisible
		if q.alive {
			e[0] |= entAlive
		}
		le.PutUint32(e[1:], uint32(q.x))
		le.PutUint32(e[5:], uint32(q.y))
	}
	for n, k := range s.feed {
		if ticksLeft(s.tick, k.tick, killFeedTicks) == 0 {
			break // newest first: the rest are older
		}
		e := b[snapFeed+n*snapKillSize:]
		e[0], e[1] = k.killer+1, k.victim
		copy(e[2:], k.killerName[:])
		copy(e[2+feedNameLen:], k.victimName[:])
	}
	return b
}

func (g *Game) spectatorSnapshot() []byte {
	s := &g.st
	b := g.snap[:SnapshotSpectatorSize]
	clear(b)
	copy(b, snapMagic)
	b[4] = snapKindSpectator
	if s.ended {
		b[5] = snapEnded
	}
	b[6] = s.matchWinner()
	le.PutUint32(b[8:], s.secondsLeft())
	le.PutUint16(b[12:], uint16(s.scoreLimit))
	for j := range s.players {
		p := &s.players[j]
		if !p.active {
			continue
		}
		e := b[specEnts+j*specEntSize:]
		e[0] = entActive
		if p.alive {
			e[0] |= entAlive
		}
		le.PutUint16(e[2:], uint16(p.angle))
		le.PutUint32(e[4:], uint32(p.x))
		le.PutUint32(e[8:], uint32(p.y))
		if p.flash > 0 {
			e[0] |= entShot
			le.PutUint32(e[12:], uint32(p.shotX))
			le.PutUint32(e[16:], uint32(p.shotY))
		}
		le.PutUint32(e[20:], uint32(max(p.kills, 0)))
		putName(e[24:24+specNameLen], p.name)
	}
	return b
}

// visibleFrom reports whether the sprite of a player at (x, y) covers at
// least one screen column of cam in which no wall is nearer than the sprite:
// exactly the columns drawSprite draws (whether the texels there are opaque
// is not tested, so a sprite may be included that draws nothing). A player
// whose sprite is hidden behind walls in every column is not visible.
func visibleFrom(cam *camera, x, y sdk.Fixed) bool {
	depth := cam.depthOf(x, y)
	if depth == 0 {
		return false
	}
	b, ok := cam.billboardAt(x, y, depth)
	if !ok {
		return false
	}
	for col := b.x0; col < b.x1; col++ {
		rdx, rdy := cam.ray(int(col))
		// drawSprite draws column col when depth < zbuf[col] = max(castRay,
		// minDepth); depth >= minSprite > minDepth, so when castRay > depth.
		if t, _, _ := castRayUntil(cam.px, cam.py, rdx, rdy, depth); t > depth {
			return true
		}
	}
	return false
}

// putName writes the first len(dst) characters of name as the renderer's font
// draws them: ASCII as is, every other character (and NUL) as '?', the rest of
// dst zero. Drawing the result is pixel-identical to drawing the name.
func putName(dst []byte, name string) {
	n := 0
	for i := 0; i < len(name) && n < len(dst); i++ {
		c := name[i]
		if c >= 0x80 && c < 0xC0 {
			continue // UTF-8 continuation byte
		}
		if c >= 0x80 || c == 0 {
			c = '?'
		}
		dst[n] = c
		n++
	}
}

func clamp32(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

// snapshot is a decoded snapshot: everything the renderer draws.
type snapshot struct {
	kind byte // snapKindPlayer or snapKindSpectator

	// Both kinds.
	ended      bool
	winner     int // -1: none (or the match is not over)
	secsLeft   int
	scoreLimit int
	// Player snapshots: the other players the viewer sees. Spectator
	// snapshots: every player in the match.
	ents [MaxPlayers]entity

	// Player snapshots only: the viewer.
	slot          int
	alive, hurt   bool
	flash, health int32
	respawnSecs   int
	rank, count   int
	kills         int
	x, y          sdk.Fixed
	angle         sdk.Angle
	winnerName    [winnerNameLen]byte

	// Combat feedback (feedback.go), player snapshots only.
	hitLeft  int32 // ticks of hit marker left (0: none)
	hitKill  bool  // the hit killed
	dmgLeft  int32 // ticks of damage arrow left (0: none)
	dmgFrom  uint8 // bearing to the shooter
	feed     [feedLen]kill
	feedSize int // entries in feed (tick unused)
}

// entity is another player: in a player snapshot one the viewer can see, in
// a spectator snapshot any player in the match.
type entity struct {
	on, alive, shot bool
	angle           sdk.Angle
	x, y            sdk.Fixed
	shotX, shotY    sdk.Fixed
	kills           int
	name            [specNameLen]byte
}

// mapCoord clamps a coordinate from a snapshot to the map (walls included),
// where every real position lies, so that garbage cannot make lines long.
func mapCoord(v uint32) sdk.Fixed {
	return min(max(sdk.Fixed(int32(v)), 0), sdk.FixedInt(mapW))
}

// decode parses b into s, reporting false when b is not an arena-snap-v1
// snapshot (wrong size, magic, kind or slot). Every field of a well-formed
// snapshot is clamped to what the renderer can draw; nothing in it can make
// rendering fail.
func (s *snapshot) decode(b []byte) bool {
	*s = snapshot{}
	if len(b) < 5 || string(b[:4]) != snapMagic {
		return false
	}
	s.kind = b[4]
	switch {
	case s.kind == snapKindPlayer && len(b) == SnapshotPlayerSize:
		if b[5] >= MaxPlayers {
			return false
		}
		s.slot = int(b[5])
		f := b[snapFlags]
		s.alive, s.hurt, s.ended = f&snapAlive != 0, f&snapHurt != 0, f&snapEnded != 0
		s.flash = int32(min(b[snapFlash], flashTicks))
		s.health = int32(b[snapHealth])
		s.respawnSecs = int(b[snapRespawn])
		s.rank, s.count = int(b[snapRank]), int(b[snapCount])
		s.kills = int(le.Uint32(b[snapKills:]))
		s.secsLeft = int(le.Uint32(b[snapSecs:]))
		s.scoreLimit = int(le.Uint16(b[snapLimit:]))
		s.winner = winnerSlot(b[snapWinner])
		s.x, s.y = mapCoord(le.Uint32(b[snapX:])), mapCoord(le.Uint32(b[snapY:]))
		s.angle = sdk.Angle(le.Uint16(b[snapFacing:]))
		copy(s.winnerName[:], b[snapWinnerName:snapWinnerName+winnerNameLen])
		s.hitLeft = int32(min(b[snapHit]&^snapHitKill, hitMarkerTicks))
		s.hitKill = s.hitLeft > 0 && b[snapHit]&snapHitKill != 0
		s.dmgLeft, s.dmgFrom = int32(min(b[snapDmg], damageDirTicks)), b[snapDmgFrom]
		for n := range s.feed {
			e := b[snapFeed+n*snapKillSize:]
			if e[0] == 0 || e[0] > MaxPlayers || e[1] >= MaxPlayers {
				break
			}
			k := &s.feed[s.feedSize]
			k.killer, k.victim = e[0]-1, e[1]
			copy(k.killerName[:], e[2:])
			copy(k.victimName[:], e[2+feedNameLen:])
			s.feedSize++
		}
		for j := range s.ents {
			e := b[snapEnts+j*snapEntSize:]
			if e[0]&entVisible == 0 || j == s.slot {
				continue
			}
			s.ents[j] = entity{on: true, alive: e[0]&entAlive != 0,
				x: mapCoord(le.Uint32(e[1:])), y: mapCoord(le.Uint32(e[5:]))}
		}
		return true
	case s.kind == snapKindSpectator && len(b) == SnapshotSpectatorSize:
		s.ended = b[5]&snapEnded != 0
		s.winner = winnerSlot(b[6])
		s.secsLeft = int(le.Uint32(b[8:]))
		s.scoreLimit = int(le.Uint16(b[12:]))
		for j := range s.ents {
			e := b[specEnts+j*specEntSize:]
			if e[0]&entActive == 0 {
				continue
			}
			q := &s.ents[j]
			*q = entity{on: true, alive: e[0]&entAlive != 0, shot: e[0]&entShot != 0,
				angle: sdk.Angle(le.Uint16(e[2:])),
				x:     mapCoord(le.Uint32(e[4:])), y: mapCoord(le.Uint32(e[8:])),
				shotX: mapCoord(le.Uint32(e[12:])), shotY: mapCoord(le.Uint32(e[16:])),
				kills: int(le.Uint32(e[20:]))}
			copy(q.name[:], e[24:24+specNameLen])
		}
		if s.winner >= 0 && !s.ents[s.winner].on {
			s.winner = -1
		}
		return true
	}
	return false
}

func winnerSlot(b byte) int {
	if b >= MaxPlayers {
		return -1
	}
	return int(b)
}

// cstr returns b up to its first zero byte.
func cstr(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
