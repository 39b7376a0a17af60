package arena

import "ludus.dev/ludus/sdk/abi"

// View renders player slot's first-person view, or the spectator's top-down
// map for abi.SpectatorSlot and for slots nobody holds. It only reads the state.
//
// The returned slice is the game's frame buffer, reused by the next call: copy
// it to keep it. Rendering does not allocate.
func (g *Game) View(slot int) []byte {
	c := canvas(g.frame[abi.Indexed8HeaderSize:])
	if slot >= 0 && slot < MaxPlayers && g.st.players[slot].active {
		g.renderPlayer(c, slot)
	} else {
		g.renderSpectator(c)
	}
	return g.frame
}
