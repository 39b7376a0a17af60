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
// first byte is the button mask, extra bytes and unknown bits are ignored.
func (g *Game) applyInput(slot int, payload []byte) {
	if len(payload) == 0 {
		return
	}
	g.st.players[slot].input = payload[0] & inputMask
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
