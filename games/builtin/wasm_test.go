package builtin

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// TestArenaWasmMatchesNative runs the embedded module and the native arena
// package side by side for 200 ticks with 8 bots plus a human replacing one of
// them: every state hash, sampled snapshots (ludus_view), the frames
// ludus_render draws from them in a fresh instance where ludus_init never ran,
// the checkpoint bytes and the result must be identical. Benchmarks and
// replays rely on native == wasm.
func TestArenaWasmMatchesNative(t *testing.T) {
	const seed = 20240607
	config := []byte(`{"bots":8,"score_limit":50}`)
	r, cm := compileArena(t)
	w := instantiate(t, r, cm, seed)
	painter := instantiate(t, r, cm, 1) // only _initialize ran: a browser's renderer

	if v := w.call(abi.ExportABIVersion); v != abi.Version {
		t.Fatalf("ludus_abi_version = %d", v)
	}
	meta, err := abi.ParseMeta(w.slice(w.call(abi.ExportMeta)))
	if err != nil || !reflect.DeepEqual(meta, arena.New().Meta()) {
		t.Fatalf("ludus_meta = %+v, %v", meta, err)
	}
	if rc := w.call(abi.ExportInit, seed, w.put([]byte(`{"bots":`))); rc == 0 {
		t.Fatal("ludus_init accepted invalid JSON")
	}
	if rc := w.call(abi.ExportInit, seed, w.put(config)); rc != 0 {
		t.Fatalf("ludus_init = %d", rc)
	}
	native := arena.New()
	if err := native.Init(seed, config); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(1, 1))
	for tick := 1; tick <= 200; tick++ {
		var evs []abi.Event
		switch {
		case tick == 10:
			evs = append(evs, abi.Event{Kind: abi.EventJoin, Slot: 0, Payload: []byte("ada")})
		case tick > 10:
			evs = append(evs, abi.Event{Kind: abi.EventInput, Slot: 0, Payload: []byte{byte(rng.IntN(128))}})
		}
		ev := abi.AppendEvents(nil, evs)
		wEnded := w.call(abi.ExportStep, w.put(ev)) == abi.StepEnded
		nEnded := sdk.StepEvents(native, ev)
		if wh, nh := w.call(abi.ExportStateHash), native.StateHash(); wh != nh || wEnded != nEnded {
			t.Fatalf("tick %d: wasm hash %x, native %x (ended %v, %v)", tick, wh, nh, wEnded, nEnded)
		}
		if tick%40 == 0 {
			for slot := int32(-1); slot < arena.MaxPlayers; slot++ {
				wv := w.slice(w.call(abi.ExportView, i32(slot)))
				if !bytes.Equal(wv, native.View(int(slot))) {
					t.Fatalf("tick %d: snapshot of slot %d differs", tick, slot)
				}
				frame := painter.slice(painter.call(abi.ExportRender, painter.put(wv)))
				if !bytes.Equal(frame, native.Render(wv)) {
					t.Fatalf("tick %d: ludus_render of slot %d's snapshot differs from the native Render", tick, slot)
				}
			}
		}
	}

	ck := w.slice(w.call(abi.ExportSave))
	if !bytes.Equal(ck, native.Save()) {
		t.Fatal("ludus_save differs from the native checkpoint")
	}
	var wr, nr abi.Result
	if err := json.Unmarshal(w.slice(w.call(abi.ExportResult)), &wr); err != nil {
		t.Fatal(err)
	}
	nb, _ := json.Marshal(native.Result())
	_ = json.Unmarshal(nb, &nr)
	if !resultsEqual(wr, nr) {
		t.Fatalf("results differ:\nwasm   %+v\nnative %+v", wr, nr)
	}

	// A fresh instance restored from the checkpoint continues identically.
	w2 := instantiate(t, r, cm, seed+1)
	if rc := w2.call(abi.ExportLoad, w2.put(ck)); rc != 0 {
		t.Fatalf("ludus_load = %d", rc)
	}
	if w2.call(abi.ExportLoad, w2.put(ck[:len(ck)-1])) == 0 {
		t.Fatal("ludus_load accepted a truncated checkpoint")
	}
	for tick := 0; tick < 50; tick++ {
		ev := abi.AppendEvent(nil, abi.Event{Kind: abi.EventInput, Slot: 0, Payload: []byte{arena.BtnFire | arena.BtnTurnLeft}})
		w.call(abi.ExportStep, w.put(ev))
		w2.call(abi.ExportStep, w2.put(ev))
		if a, b := w.call(abi.ExportStateHash), w2.call(abi.ExportStateHash); a != b {
			t.Fatalf("tick %d after ludus_load: %x != %x", tick, a, b)
		}
	}

	// Hostile calls: bad lengths and garbage events never trap.
	w.call(abi.ExportStep, i32(-1))
	w.call(abi.ExportStep, 1<<31-1)
	garbage := make([]byte, 5000)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	w.call(abi.ExportStep, w.put(garbage))
	if w.call(abi.ExportBuffer, i32(-5)) != 0 {
		t.Error("ludus_buffer(-5) != 0")
	}
	w.call(abi.ExportView, i32(1000))
	// ludus_render takes garbage and bad lengths without trapping, and draws
	// the same error frame as the native renderer.
	badFrame := arena.NewRenderer().Render(garbage)
	if f := w.slice(w.call(abi.ExportRender, w.put(garbage))); !bytes.Equal(f, badFrame) {
		t.Error("ludus_render of garbage differs from the native renderer's")
	}
	for _, n := range []int32{-1, 1<<31 - 1, 0} {
		if f := w.slice(w.call(abi.ExportRender, i32(n))); !bytes.Equal(f, badFrame) {
			t.Errorf("ludus_render(%d) did not draw the error frame", n)
		}
	}
	if w.call(abi.ExportInit, 1, i32(-1)) == 0 {
		t.Error("ludus_init with a negative length succeeded")
	}
}

func resultsEqual(a, b abi.Result) bool {
	return a.Ended == b.Ended && a.Ticks == b.Ticks && a.Winner == b.Winner && slices.Equal(a.Players, b.Players)
}

// BenchmarkWasmStep8Bots, BenchmarkWasmView (a player's snapshot) and
// BenchmarkWasmRender measure the module under wazero (uninstrumented), for
// comparison with the native benchmarks in games/arena.
func BenchmarkWasmStep8Bots(b *testing.B) {
	w := benchInstance(b)
	for b.Loop() {
		if w.call(abi.ExportStep, 0) == abi.StepEnded {
			w.call(abi.ExportInit, 1, w.put([]byte(`{"bots":8}`)))
		}
	}
}

func BenchmarkWasmView(b *testing.B) {
	w := benchInstance(b)
	slot := 0
	for b.Loop() {
		w.call(abi.ExportView, i32(int32(slot)))
		slot = (slot + 1) % arena.MaxPlayers
	}
}

func BenchmarkWasmRender(b *testing.B) {
	w := benchInstance(b)
	var snaps [][]byte
	for slot := range arena.MaxPlayers {
		snaps = append(snaps, w.slice(w.call(abi.ExportView, i32(int32(slot)))))
	}
	i := 0
	for b.Loop() {
		w.call(abi.ExportRender, w.put(snaps[i%arena.MaxPlayers]))
		i++
	}
}

func benchInstance(b *testing.B) *instance {
	r, cm := compileArena(b)
	w := instantiate(b, r, cm, 1)
	w.call(abi.ExportInit, 1, w.put([]byte(`{"bots":8}`)))
	for range 100 {
		w.call(abi.ExportStep, 0)
	}
	return w
}
