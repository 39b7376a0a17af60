package snapstream

import (
	"testing"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/gateway/framecodec"
	"ludus.dev/ludus/sdk/abi"
)

// budget is the target for one player's snapshot stream: 8,000 bytes/s
// through delta-deflate at tick rate.
const budget = 8000

// stream plays 60 s of a scripted match — slot 0 stands for 10 s, walks
// (veering right every 2 s) for 20 s and turns left for 30 s, among bots —
// and encodes slot's snapshot every tick with delta-deflate and a keyframe
// every 2 s, as the gateway does. It returns bytes per second and per
// snapshot, and the average keyframe and delta sizes.
func stream(t *testing.T, bots, slot int) (perSec, perSnap, key, delta float64) {
	t.Helper()
	g := arena.New()
	if err := g.Init(20260801, []byte(`{"bots":`+string(rune('0'+bots))+`,"score_limit":1000,"time_limit_s":3600}`)); err != nil {
		t.Fatal(err)
	}
	g.Join(0, "p")
	enc := framecodec.NewEncoder(framecodec.EncoderOptions{Compression: framecodec.Deflate, KeyframeTicks: 2 * arena.TickRate})
	dec := &framecodec.Decoder{}
	const secs = 60
	var total, keys, keyBytes, deltas, deltaBytes int
	var buf []byte
	last := byte(0xFF)
	for tick := int64(1); tick <= secs*arena.TickRate; tick++ {
		var mask byte
		switch {
		case tick <= 10*arena.TickRate:
		case tick <= 30*arena.TickRate:
			mask = arena.BtnForward
			if (tick-10*arena.TickRate)%(2*arena.TickRate) < arena.TickRate*4/10 {
				mask |= arena.BtnTurnRight
			}
		default:
			mask = arena.BtnTurnLeft
		}
		if mask != last {
			g.Input(0, []byte{mask})
			last = mask
		}
		g.Step()
		snap := g.View(slot)
		var info framecodec.Info
		var err error
		buf, info, err = enc.Encode(buf[:0], tick, snap)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dec.Decode(buf)
		if err != nil || string(got) != string(snap) {
			t.Fatalf("tick %d: the snapshot does not survive the codec: %v", tick, err)
		}
		total += len(buf)
		if info.Keyframe {
			keys++
			keyBytes += len(buf)
		} else {
			deltas++
			deltaBytes += len(buf)
		}
	}
	n := float64(keys + deltas)
	return float64(total) / secs, float64(total) / n, float64(keyBytes) / float64(keys), float64(deltaBytes) / float64(max(deltas, 1))
}

// TestSnapshotStreamBudget: a player's snapshot stream stays within budget
// in a full match (7 bots) and in the 3-bot match of `ludus bench stream`;
// the spectator's stream is reported.
func TestSnapshotStreamBudget(t *testing.T) {
	for _, c := range []struct {
		name       string
		bots, slot int
		limit      float64
	}{
		{"player, 7 bots", 7, 0, budget},
		{"player, 3 bots", 3, 0, budget},
		{"spectator, 7 bots", 7, abi.SpectatorSlot, 0},
	} {
		perSec, perSnap, key, delta := stream(t, c.bots, c.slot)
		t.Logf("%s: %.0f bytes/s, %.1f bytes/snapshot (keyframes %.0f, deltas %.1f) at %d snapshots/s",
			c.name, perSec, perSnap, key, delta, arena.TickRate)
		if c.limit > 0 && perSec > c.limit {
			t.Errorf("%s: %.0f bytes/s, over the budget of %.0f", c.name, perSec, c.limit)
		}
	}
}
