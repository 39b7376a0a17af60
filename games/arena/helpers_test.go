package arena

import (
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// newMatch returns a game initialised with seed and a JSON config.
func newMatch(t testing.TB, seed uint64, config string) *Game {
	t.Helper()
	g := New()
	if err := g.Init(seed, []byte(config)); err != nil {
		t.Fatalf("Init(%d, %s): %v", seed, config, err)
	}
	return g
}

// events encodes events for sdk.ApplyEvents / sdk.StepEvents.
func events(evs ...abi.Event) []byte { return abi.AppendEvents(nil, evs) }

func join(slot uint8, name string) abi.Event {
	return abi.Event{Kind: abi.EventJoin, Slot: slot, Payload: []byte(name)}
}

func leave(slot uint8) abi.Event { return abi.Event{Kind: abi.EventLeave, Slot: slot} }

func input(slot uint8, payload ...byte) abi.Event {
	return abi.Event{Kind: abi.EventInput, Slot: slot, Payload: payload}
}

// stepN steps g n times with no events and reports whether the match ended.
func stepN(g *Game, n int) (ended bool) {
	for range n {
		ended = g.Step()
	}
	return ended
}

// views copies every player's snapshot and the spectator's.
func views(g *Game) [][]byte {
	out := make([][]byte, 0, MaxPlayers+1)
	for slot := abi.SpectatorSlot; slot < MaxPlayers; slot++ {
		out = append(out, append([]byte(nil), g.View(slot)...))
	}
	return out
}

var _ sdk.Game = New()
