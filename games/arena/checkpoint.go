package arena

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf8"

	"ludus.dev/ludus/sdk"
)

// The checkpoint is a fixed little-endian layout: a header, then every player
// slot with a length-prefixed name, then the kill feed, then one aim record
// per player whose mouse-look state is not zero. The same encoding feeds
// StateHash, so the hash covers exactly what a checkpoint restores.
//
// Aim records come last and only when needed so that a match nobody played
// with a mouse has the checkpoints and state hashes it had before mouse look
// existed (replays of key inputs hash as they always did), and older
// checkpoints still load.
const (
	ckptMagic    = "ARN2"
	ckptHeader   = 4 + 8 + 8 + 1 + 8 + 4 + 4
	ckptPlayer   = 1 + 1 + 4*2 + 2 + 4*5 + 4*2 + 4*2 + 4 + 8 + 8 + 1 + 1 + 1 + 1 // without the name
	ckptKill     = 8 + 1 + 1 + 2*feedNameLen
	ckptAim      = 1 + 1 + 2 + 4 + 4 // slot, on, lock, last, owed
	ckptMinBytes = ckptHeader + MaxPlayers*ckptPlayer + feedLen*ckptKill
	ckptMaxBytes = ckptMinBytes + MaxPlayers*maxNameBytes + MaxPlayers*ckptAim
)

// Player flag bits in a checkpoint.
const (
	flagActive = 1 << iota
	flagBot
	flagAlive
	flagHitKill
)

// StateHash is FNV-1a 64 over the checkpoint encoding of the whole state. It
// reuses a scratch buffer, so it does not allocate after the first call.
func (g *Game) StateHash() uint64 {
	g.enc = g.st.appendTo(g.enc[:0])
	return sdk.HashBytes(g.enc)
}

// Save returns a checkpoint of the whole state.
func (g *Game) Save() []byte { return g.st.appendTo(make([]byte, 0, ckptMaxBytes)) }

// Load restores a checkpoint made by Save. The input is validated completely
// before anything changes; on error the game is left as it was.
func (g *Game) Load(b []byte) error {
	var s state
	if err := s.decode(b); err != nil {
		return err
	}
	g.st = s
	return nil
}

func (s *state) appendTo(b []byte) []byte {
	le := binary.LittleEndian
	b = append(b, ckptMagic...)
	b = le.AppendUint64(b, s.seed)
	b = le.AppendUint64(b, uint64(s.tick))
	b = append(b, boolByte(s.ended))
	b = le.AppendUint64(b, s.rng.State())
	b = le.AppendUint32(b, uint32(s.scoreLimit))
	b = le.AppendUint32(b, uint32(s.timeLimit))
	for i := range s.players {
		p := &s.players[i]
		var flags byte
		if p.active {
			flags |= flagActive
		}
		if p.bot {
			flags |= flagBot
		}
		if p.alive {
			flags |= flagAlive
		}
		if p.hitKill {
			flags |= flagHitKill
		}
		b = append(b, flags, p.input)
		b = le.AppendUint32(b, uint32(p.x))
		b = le.AppendUint32(b, uint32(p.y))
		b = le.AppendUint16(b, uint16(p.angle))
		for _, v := range [...]int32{p.health, p.respawn, p.cooldown, p.flash, p.hurt} {
			b = le.AppendUint32(b, uint32(v))
		}
		b = le.AppendUint32(b, uint32(p.shotX))
		b = le.AppendUint32(b, uint32(p.shotY))
		b = le.AppendUint32(b, uint32(p.kills))
		b = le.AppendUint32(b, uint32(p.deaths))
		b = le.AppendUint32(b, uint32(p.botTimer))
		b = le.AppendUint64(b, uint64(p.hitTick))
		b = le.AppendUint64(b, uint64(p.dmgTick))
		b = append(b, p.dmgFrom, byte(p.botTurn), p.botStrafe, byte(len(p.name)))
		b = append(b, p.name...)
	}
	for i := range s.feed {
		k := &s.feed[i]
		b = le.AppendUint64(b, uint64(k.tick))
		b = append(b, k.killer, k.victim)
		b = append(b, k.killerName[:]...)
		b = append(b, k.victimName[:]...)
	}
	for i := range s.players {
		p := &s.players[i]
		if !p.aimOn && p.aimOwed == 0 {
			continue // then aimLock and aimLast are zero too (takeAim)
		}
		b = append(b, byte(i), boolByte(p.aimOn))
		b = le.AppendUint16(b, p.aimLock)
		b = le.AppendUint32(b, uint32(p.aimLast))
		b = le.AppendUint32(b, uint32(p.aimOwed))
	}
	return b
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// ErrCheckpoint is wrapped by every error Load returns.
var ErrCheckpoint = errors.New("arena: malformed checkpoint")

// ckptError wraps ErrCheckpoint with a detail (without fmt, whose import
// would add WASI imports and size to the module).
func ckptError(detail string) error { return &checkpointError{detail} }

type checkpointError struct{ detail string }

func (e *checkpointError) Error() string { return ErrCheckpoint.Error() + ": " + e.detail }
func (e *checkpointError) Unwrap() error { return ErrCheckpoint }

// reader is a bounds-checked little-endian cursor; after the first short read
// it returns zeros and remembers the failure.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte    { return r.take(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) i32() int32  { return int32(r.u32()) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }

// decode parses and validates a checkpoint into s.
func (s *state) decode(b []byte) error {
	if len(b) < ckptMinBytes || len(b) > ckptMaxBytes {
		return ckptError("size " + strconv.Itoa(len(b)))
	}
	r := &reader{b: b}
	if string(r.take(4)) != ckptMagic {
		return ckptError("bad magic")
	}
	s.seed = r.u64()
	s.tick = int64(r.u64())
	ended := r.u8()
	s.ended = ended == 1
	s.rng.SetState(r.u64())
	s.scoreLimit = r.i32()
	s.timeLimit = r.i32()
	if ended > 1 || s.tick < 0 || s.scoreLimit < 1 || s.scoreLimit > maxScoreLimit ||
		s.timeLimit < 1 || s.timeLimit > maxTimeLimitS*TickRate {
		return ckptError("bad header")
	}
	for i := range s.players {
		if err := s.players[i].decode(r, s.tick); err != nil {
			return ckptError("slot " + strconv.Itoa(i) + ": " + err.Error())
		}
	}
	for i := range s.feed {
		if err := s.feed[i].decode(r, s.tick); err != nil {
			return ckptError("kill " + strconv.Itoa(i) + ": " + err.Error())
		}
		// Newest first, and no entry after an empty one.
		if i > 0 && (s.feed[i].tick > s.feed[i-1].tick || s.feed[i].tick != 0 && s.feed[i-1].tick == 0) {
			return ckptError("kill " + strconv.Itoa(i) + ": out of order")
		}
	}
	for next := 0; len(r.b) > 0 && !r.bad; {
		slot := int(r.u8())
		if slot < next || slot >= MaxPlayers {
			return ckptError("aim record of slot " + strconv.Itoa(slot) + " out of order")
		}
		if err := s.players[slot].decodeAim(r); err != nil {
			return ckptError("aim of slot " + strconv.Itoa(slot) + ": " + err.Error())
		}
		next = slot + 1
	}
	if r.bad || len(r.b) != 0 {
		return ckptError("wrong length")
	}
	return nil
}

// decodeAim reads one aim record (after the slot) and checks it is one the
// game could hold: a human's, not all zero, no lock or total without mouse
// look, the owed turn in range and zero while dead.
func (p *player) decodeAim(r *reader) error {
	on := r.u8()
	p.aimOn = on == 1
	p.aimLock = r.u16()
	p.aimLast = r.i32()
	p.aimOwed = r.i32()
	switch {
	case r.bad:
		return errors.New("truncated")
	case !p.active || p.bot:
		return errors.New("not a human's slot")
	case on > 1 || !p.aimOn && (p.aimLock != 0 || p.aimLast != 0 || p.aimOwed == 0):
		return errors.New("bad mouse look state")
	case p.aimOwed < -maxAimOwed || p.aimOwed > maxAimOwed || !p.alive && p.aimOwed != 0:
		return errors.New("owed turn out of range")
	}
	return nil
}

// decode reads one player and checks every field against the invariants the
// game keeps, so a loaded state can never be one the game could not reach in
// shape (positions inside the map, timers and health in range, event ticks
// not after tick, a sane name).
func (p *player) decode(r *reader, tick int64) error {
	flags := r.u8()
	p.active = flags&flagActive != 0
	p.bot = flags&flagBot != 0
	p.alive = flags&flagAlive != 0
	p.hitKill = flags&flagHitKill != 0
	p.input = r.u8()
	p.x, p.y = sdk.Fixed(r.i32()), sdk.Fixed(r.i32())
	p.angle = sdk.Angle(r.u16())
	p.health, p.respawn, p.cooldown, p.flash, p.hurt = r.i32(), r.i32(), r.i32(), r.i32(), r.i32()
	p.shotX, p.shotY = sdk.Fixed(r.i32()), sdk.Fixed(r.i32())
	p.kills, p.deaths = r.i32(), r.i32()
	p.botTimer = r.i32()
	p.hitTick, p.dmgTick = int64(r.u64()), int64(r.u64())
	p.dmgFrom = r.u8()
	p.botTurn = int8(r.u8())
	p.botStrafe = r.u8()
	nameLen := int(r.u8())
	if nameLen > maxNameBytes {
		return errors.New("name too long")
	}
	name := r.take(nameLen)
	if r.bad {
		return errors.New("truncated")
	}
	switch {
	case flags&^(flagActive|flagBot|flagAlive|flagHitKill) != 0:
		return errors.New("unknown flags")
	case !p.active && *p != (player{}):
		return errors.New("empty slot with data")
	case !p.active && nameLen != 0:
		return errors.New("empty slot with a name")
	case p.input&^inputMask != 0:
		return errors.New("bad input mask")
	case !inMap(p.x) || !inMap(p.y) || !inMap(p.shotX) || !inMap(p.shotY):
		return errors.New("position outside the map")
	case p.health < 0 || p.health > maxHealth || p.alive != (p.health > 0):
		return errors.New("bad health")
	case p.respawn < 0 || p.respawn > respawnTicks || p.cooldown < 0 || p.cooldown > fireCooldown ||
		p.flash < 0 || p.flash > flashTicks || p.hurt < 0 || p.hurt > hurtTicks:
		return errors.New("timer out of range")
	case p.kills < 0 || p.deaths < 0:
		return errors.New("negative score")
	case p.botTurn < -1 || p.botTurn > 1 || p.botStrafe > 2 || p.botTimer < 0 || p.botTimer > 60:
		return errors.New("bad bot state")
	case p.hitTick < 0 || p.hitTick > tick || p.hitTick == 0 && p.hitKill ||
		p.dmgTick < 0 || p.dmgTick > tick || p.dmgTick == 0 && p.dmgFrom != 0:
		return errors.New("bad combat feedback")
	case p.active && (nameLen == 0 || !utf8.Valid(name)):
		return errors.New("bad name")
	}
	p.name = string(name)
	return nil
}

// decode reads one kill feed entry: empty (all zero), or a kill at a tick
// not after tick between two different slots, with names as putName writes
// them.
func (k *kill) decode(r *reader, tick int64) error {
	k.tick = int64(r.u64())
	k.killer, k.victim = r.u8(), r.u8()
	copy(k.killerName[:], r.take(feedNameLen))
	copy(k.victimName[:], r.take(feedNameLen))
	switch {
	case r.bad:
		return errors.New("truncated")
	case k.tick == 0 && *k != (kill{}):
		return errors.New("empty entry with data")
	case k.tick < 0 || k.tick > tick:
		return errors.New("bad tick")
	case k.tick != 0 && (k.killer >= MaxPlayers || k.victim >= MaxPlayers || k.killer == k.victim):
		return errors.New("bad slots")
	case !validName(k.killerName[:]) || !validName(k.victimName[:]):
		return errors.New("bad name")
	}
	return nil
}

// inMap reports whether a coordinate lies within the map (walls included);
// shot end points may touch the far edge of the border.
func inMap(v sdk.Fixed) bool { return v >= 0 && v <= sdk.FixedInt(mapW) }
