package engine

import (
	"context"
	"encoding/json"
	"testing"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/games/density"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

func startGame(t *testing.T, e *Engine, wasm []byte, seed uint64, config string) *Instance {
	t.Helper()
	ctx := context.Background()
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(ctx) })
	if err := inst.Init(ctx, seed, []byte(config)); err != nil {
		t.Fatal(err)
	}
	return inst
}

// pongRun plays pong for ticks with player 0 joined and holding mask, and
// returns the state hashes and the last view.
func pongRun(t *testing.T, e *Engine, seed uint64, mask byte, ticks int) ([]uint64, []byte) {
	ctx := context.Background()
	inst := startGame(t, e, builtin.Pong, seed, `{"score_limit":3}`)
	var hashes []uint64
	for i := 0; i < ticks; i++ {
		var evs []abi.Event
		switch i {
		case 0:
			evs = []abi.Event{{Kind: abi.EventJoin, Slot: 0, Payload: []byte("ada \"the\" \\ hacker\x00")},
				{Kind: abi.EventInput, Slot: 0, Payload: []byte{mask}}, {Kind: abi.EventInput, Slot: 9, Payload: []byte{1}}}
		case 5:
			evs = []abi.Event{{Kind: 77, Slot: 1}, {Kind: abi.EventInput, Slot: 0}} // ignored
		}
		if _, err := inst.Step(ctx, evs); err != nil {
			t.Fatal(err)
		}
		h, err := inst.StateHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	v, err := inst.View(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	return hashes, append([]byte(nil), v...)
}

// TestPongC runs the C sample through the engine: valid metadata, determinism,
// inputs that change the state, views in pong-state-v1, a JSON result,
// checkpoints.
func TestPongC(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	meta, err := e.Validate(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name != "pong" || meta.MaxPlayers != 2 || meta.ViewFormat != "pong-state-v1" || meta.TickRate != 60 {
		t.Fatalf("meta %+v", meta)
	}
	h1, v1 := pongRun(t, e, 5, 1, 3000)
	h2, v2 := pongRun(t, e, 5, 1, 3000)
	if !equalU64(h1, h2) || string(v1) != string(v2) {
		t.Fatal("two runs of the same pong match differ")
	}
	h3, v3 := pongRun(t, e, 5, 2, 3000)
	if equalU64(h1, h3) {
		t.Fatal("holding down instead of up did not change the game")
	}
	if len(v3) != 32 || string(v3[:4]) != "PONG" || v3[4] != 1 || v3[5] != 0 || v3[22]&2 == 0 {
		t.Fatalf("view % x", v3)
	}
	// Result, after the match (3 points, a bot against a player holding a key) ended.
	inst := startGame(t, e, builtin.Pong, 5, `{"score_limit":1}`)
	if _, err := inst.Step(ctx, []abi.Event{{Kind: abi.EventJoin, Slot: 1, Payload: []byte("bob")}}); err != nil {
		t.Fatal(err)
	}
	ended := false
	for i := 0; i < 20000 && !ended; i++ {
		if ended, err = inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	res, err := inst.Result(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r abi.Result
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("result %s: %v", res, err)
	}
	if !ended || !r.Ended || len(r.Players) != 1 || r.Players[0].Name != "bob" || r.Ticks == 0 {
		t.Fatalf("result %s (ended %v)", res, ended)
	}
	// Checkpoints: save, run on, load into a fresh instance, run on: same hashes.
	a := startGame(t, e, builtin.Pong, 8, "")
	for i := 0; i < 100; i++ {
		a.Step(ctx, nil)
	}
	cp, err := a.Save(ctx)
	if err != nil || len(cp) == 0 {
		t.Fatalf("save: %d bytes, %v", len(cp), err)
	}
	b := startGame(t, e, builtin.Pong, 1, "")
	if err := b.Load(ctx, a.Tick(), cp); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		a.Step(ctx, nil)
		b.Step(ctx, nil)
	}
	ha, _ := a.StateHash(ctx)
	hb, _ := b.StateHash(ctx)
	if ha != hb {
		t.Fatal("a restored checkpoint diverged")
	}
	if err := b.Load(ctx, 0, cp[:10]); err == nil {
		t.Fatal("a truncated checkpoint was accepted")
	}
	if err := startGame(t, e, builtin.Pong, 1, "").Init(ctx, 1, []byte(`{"score_limit":1000}`)); err == nil {
		t.Fatal("an out-of-range config was accepted")
	}
}

// TestDensityModules: the C and Go SDK builds of the density module, and the
// native Go package, compute the same state hashes.
func TestDensityModules(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	c := startGame(t, e, builtin.DensityC, 99, "")
	g := startGame(t, e, builtin.DensityGo, 99, "")
	n := density.New()
	n.Init(99, nil)
	for i := 0; i < 1000; i++ {
		if _, err := c.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		sdk.StepEvents(n, nil)
		hc, _ := c.StateHash(ctx)
		hg, _ := g.StateHash(ctx)
		if hc != hg || hc != n.StateHash() {
			t.Fatalf("tick %d: C %x, Go %x, native %x", i+1, hc, hg, n.StateHash())
		}
	}
	vc, _ := c.View(ctx, 0)
	if string(vc) != string(n.View(0)) {
		t.Fatal("views differ")
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
