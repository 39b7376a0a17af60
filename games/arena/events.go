package arena

import (
	"strings"
	"unicode/utf8"
)

// Join seats a human in slot. Out-of-range slots and slots already held by a
// human are ignored; a bot in the slot is replaced by the human.
func (g *Game) Join(slot int, name string) {
	if slot < 0 || slot >= MaxPlayers {
		return
	}
	if p := &g.st.players[slot]; p.active && !p.bot {
		return
	}
	g.st.seat(slot, sanitizeName(name, slot), false)
}

// Leave frees a human's slot. Bots are not clients and cannot be made to leave.
func (g *Game) Leave(slot int) {
	if slot < 0 || slot >= MaxPlayers {
		return
	}
	if p := &g.st.players[slot]; p.active && !p.bot {
		*p = player{}
	}
}

// Input takes a human's input payload. Empty payloads, unknown slots and slots
// held by bots are ignored.
func (g *Game) Input(slot int, payload []byte) {
	if slot < 0 || slot >= MaxPlayers {
		return
	}
	if p := &g.st.players[slot]; !p.active || p.bot {
		return
	}
	g.applyInput(slot, payload)
}

// applyInput is the single path through which both humans and bots steer: the
// first byte is the button mask (bit 7 is ignored); the aimBytes after it, when
// present, are mouse look (takeAim); anything else is ignored. Inputs of one
// byte, as bots and key players send, never touch the aim.
func (g *Game) applyInput(slot int, payload []byte) {
	if len(payload) == 0 {
		return
	}
	p := &g.st.players[slot]
	p.input = payload[0] & inputMask
	p.takeAim(payload[1:])
}

// takeAim reads the mouse-look part of an input: aim, a little-endian int32,
// is the client's running total of horizontal mouse movement in sdk.Angle
// units (right positive), and lock, a uint16, names the pointer lock that
// total counts from (a page picks a new one for every lock, a reloaded page
// too). Inputs are state (a later one supersedes an earlier one, which may
// then never be applied), so the aim is a total, never a delta: the turn owed
// grows by the difference to the previous total of the same lock, whatever
// inputs in between were skipped. The first aim of a lock only sets where the
// count starts. An input without aim ends mouse look; a turn still owed is
// paid off anyway, since the mouse moved before it.
func (p *player) takeAim(ext []byte) {
	if len(ext) < aimBytes {
		p.aimOn, p.aimLock, p.aimLast = false, 0, 0
		return
	}
	aim, lock := int32(le.Uint32(ext)), le.Uint16(ext[4:])
	if p.aimOn && lock == p.aimLock && p.alive {
		owed := int64(p.aimOwed) + int64(aim-p.aimLast) // aim-p.aimLast wraps like the client's int32 total
		p.aimOwed = int32(min(max(owed, -int64(maxAimOwed)), int64(maxAimOwed)))
	}
	p.aimOn, p.aimLock, p.aimLast = true, lock, aim
}

// sanitizeName bounds a client-chosen display name: valid UTF-8, no control
// characters, at most maxNameBytes bytes, never empty.
func sanitizeName(name string, slot int) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7F {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimSpace(name)
	if len(name) > maxNameBytes {
		cut := maxNameBytes
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut]
	}
	if name == "" {
		return "PLAYER " + string(rune('0'+slot))
	}
	return name
}
