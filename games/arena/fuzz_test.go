package arena

import (
	"testing"

	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// FuzzEvents feeds arbitrary bytes through the event decoding and the
// Join/Leave/Input path that ludus_step uses (sdk.StepEvents), then steps,
// takes snapshots, renders them and hashes. Nothing may panic.
func FuzzEvents(f *testing.F) {
	f.Add(events(join(0, "ada"), input(0, BtnForward|BtnFire)))
	f.Add(events(join(7, "replaces a bot"), leave(7), input(7, 0xFF, 0xFF)))
	f.Add(events(join(200, "out of range"), input(3), leave(9)))
	f.Add([]byte{3, 0, 0xFF, 0xFF, 1})
	f.Add(events(join(0, "ada"), input(0, aimInput(BtnFire, 0, 1)...), input(0, aimInput(0, 1<<20, 1)...)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		g := newMatch(t, 1, `{"bots":4}`)
		for i := 0; i < 3; i++ {
			sdk.StepEvents(g, b)
		}
		if len(b) > 0 {
			g.Frame(int(int8(b[0])) % 10)
		}
		g.Frame(abi.SpectatorSlot)
		ck := g.Save()
		h := New()
		if err := h.Load(ck); err != nil {
			t.Fatalf("checkpoint of a fuzzed game does not load: %v", err)
		}
		if h.StateHash() != g.StateHash() {
			t.Fatal("hash changed through a checkpoint")
		}
	})
}
