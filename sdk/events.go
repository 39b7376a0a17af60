package sdk

import "ludus.dev/ludus/sdk/abi"

// ApplyEvents decodes the events of one tick (the wire encoding of docs/ABI.md)
// and calls g.Join, g.Leave and g.Input in log order. It is exactly what
// ludus_step does before calling g.Step, so native tests and fuzzers can drive a
// game through the same path as the host.
//
// Events for slots outside 0..MaxPlayers-1 and events of unknown kinds are
// dropped. Malformed trailing bytes are ignored after the events before them were
// applied, and ErrMalformed is returned for information; the tick still runs.
// Join names are the payload converted to a string as is (games should sanitise
// them); Input payloads alias events.
func ApplyEvents(g Game, events []byte) error {
	maxPlayers := g.Meta().MaxPlayers
	return abi.DecodeEvents(events, func(ev abi.Event) {
		slot := int(ev.Slot)
		if slot >= maxPlayers {
			return
		}
		switch ev.Kind {
		case abi.EventJoin:
			g.Join(slot, string(ev.Payload))
		case abi.EventLeave:
			g.Leave(slot)
		case abi.EventInput:
			g.Input(slot, ev.Payload)
		}
	})
}

// StepEvents applies one tick's events and then advances the tick, as
// ludus_step does. It returns whether the match has ended.
func StepEvents(g Game, events []byte) (ended bool) {
	_ = ApplyEvents(g, events) // damaged tails are ignored, as on the host
	return g.Step()
}
