package arena

import "ludus.dev/ludus/sdk/abi"

// Result reports every seated player (humans and bots) in slot order, with
// score = kills, and the winner: most kills, then fewest deaths, then lowest
// slot; -1 when the arena is empty. Players who left are no longer listed.
func (g *Game) Result() abi.Result {
	s := &g.st
	r := abi.Result{Ended: s.ended, Ticks: s.tick, Winner: s.winner(), Players: []abi.PlayerResult{}}
	for i := range s.players {
		p := &s.players[i]
		if !p.active {
			continue
		}
		r.Players = append(r.Players, abi.PlayerResult{
			Slot:   i,
			Name:   p.name,
			Score:  int64(p.kills),
			Kills:  int64(p.kills),
			Deaths: int64(p.deaths),
		})
	}
	return r
}
