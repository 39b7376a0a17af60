package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/wasmtest"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/sdk/abi"
)

// TestArenaRendererMatchesNative: the arena's snapshots, taken from a match
// instance, drawn by a Renderer (a separate instance where ludus_init never
// ran) are byte-identical to the native arena's Render of the same snapshots,
// for player and spectator snapshots; and the wasm snapshots are the native
// ones.
func TestArenaRendererMatchesNative(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	const seed, config = 31, `{"bots":7,"score_limit":1000}`
	inst := startGame(t, e, builtin.Arena, seed, config)
	m, _ := e.Module(BuildID(builtin.Arena))
	r, err := m.NewRenderer(ctx, InstanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	native := arena.New()
	if err := native.Init(seed, []byte(config)); err != nil {
		t.Fatal(err)
	}
	join := []abi.Event{{Kind: abi.EventJoin, Slot: 0, Payload: []byte("ada")}, {Kind: abi.EventInput, Slot: 0, Payload: []byte{arena.BtnForward | arena.BtnTurnLeft | arena.BtnFire}}}
	kinds := map[int]int{}
	for tick := 1; tick <= 150; tick++ {
		var evs []abi.Event
		if tick == 1 {
			evs = join
		}
		if _, err := inst.Step(ctx, evs); err != nil {
			t.Fatal(err)
		}
		sdk.StepEvents(native, abi.AppendEvents(nil, evs))
		if tick%15 != 0 {
			continue
		}
		for slot := abi.SpectatorSlot; slot < arena.MaxPlayers; slot++ {
			snap, err := inst.View(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			snap = bytes.Clone(snap)
			if !bytes.Equal(snap, native.View(slot)) {
				t.Fatalf("tick %d: the wasm snapshot of slot %d differs from the native one", tick, slot)
			}
			kinds[len(snap)]++
			frame, err := r.Render(ctx, snap)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(frame, native.Render(snap)) {
				t.Fatalf("tick %d: the frame of slot %d differs from the native Render", tick, slot)
			}
		}
	}
	if kinds[arena.SnapshotPlayerSize] == 0 || kinds[arena.SnapshotSpectatorSize] == 0 {
		t.Fatalf("snapshot sizes seen: %v", kinds)
	}
	// Garbage draws the native renderer's error frame; the renderer goes on.
	for _, b := range [][]byte{nil, []byte("not a snapshot"), make([]byte, 100000)} {
		frame, err := r.Render(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(frame, arena.NewRenderer().Render(b)) {
			t.Fatalf("%d garbage bytes: the frame differs from the native error frame", len(b))
		}
	}
	if h1, _ := inst.StateHash(ctx); h1 != native.StateHash() {
		t.Fatal("the match diverged from the native game")
	}
}

// snapMeta declares 1×1 indexed8 views drawn from snapshots.
const snapMeta = `{"name":"snap","tick_rate":30,"max_players":2,"frame_divisor":1,"view_format":"indexed8","view_width":1,"view_height":1,"snapshot_format":"test-snap-v1"}`

// Addresses of the snapModule data (the data segment starts at 1024).
const (
	frameAt      = 1536 // a valid 1×1 indexed8 frame
	wrongFrameAt = 2560 // a 2×1 frame
)

func frameBytes(w, h int) []byte {
	var pal [768]byte
	f := make([]byte, abi.Indexed8HeaderSize+w*h)
	abi.Indexed8Header(f, w, h, &pal)
	return f
}

var (
	goodFrame  = wasmtest.I64Const(frameAt<<32 | int64(abi.Indexed8HeaderSize+1))
	wrongFrame = wasmtest.I64Const(wrongFrameAt<<32 | int64(abi.Indexed8HeaderSize+2))
	noFrame    = wasmtest.I64Const(1024<<32 | 0x7fffffff)
)

// snapModule returns a valid ABI v1 module with metadata meta and, unless
// render is nil, a ludus_render export (extra functions follow it).
func snapModule(meta string, render *wasmtest.Func, extra ...wasmtest.Func) []byte {
	data := make([]byte, wrongFrameAt-1024+abi.Indexed8HeaderSize+2)
	copy(data, meta)
	copy(data[frameAt-1024:], frameBytes(1, 1))
	copy(data[wrongFrameAt-1024:], frameBytes(2, 1))
	funcs := wasmtest.ABIFuncs(wasmtest.I64Const(int64(1024)<<32 | int64(len(meta))))
	if render != nil {
		r := *render
		r.Export = abi.ExportRender
		funcs = append(funcs, r)
	}
	funcs = append(funcs, extra...)
	return wasmtest.Module{Funcs: funcs, MemoryPages: 1, ExportMemory: true, Data: data}.Bytes()
}

// renderFn is a ludus_render(len) -> i64 with body.
func renderFn(body ...[]byte) *wasmtest.Func {
	return &wasmtest.Func{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I64}, Body: wasmtest.Cat(body...)}
}

// emptyOK is a ludus_render that draws the empty snapshot (what upload
// checks) and does other for any other: `if len == 0 { good } else { other }`.
func emptyOK(other ...[]byte) *wasmtest.Func {
	return renderFn([]byte{0x20, 0x00, 0x45, 0x04, wasmtest.I64}, goodFrame, []byte{0x05}, wasmtest.Cat(other...), []byte{0x0b})
}

// TestRenderValidation: what upload checks about ludus_render.
func TestRenderValidation(t *testing.T) {
	e := hostileEngine(t, InterruptFuel)
	ctx := context.Background()
	noSnap := strings.Replace(snapMeta, `,"snapshot_format":"test-snap-v1"`, "", 1)
	bad := []struct {
		name, want string
		wasm       []byte
	}{
		{"snapshot format without ludus_render", `declares snapshot_format "test-snap-v1" but does not export ludus_render(i32) -> i64`,
			snapModule(snapMeta, nil)},
		{"wrong signature", "exports ludus_render with signature () -> i64, want (i32) -> i64",
			snapModule(snapMeta, &wasmtest.Func{Results: []byte{wasmtest.I64}, Body: goodFrame})},
		{"wrong signature without a snapshot format", "exports ludus_render with signature (i32) -> i32, want (i32) -> i64",
			snapModule(noSnap, &wasmtest.Func{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: wasmtest.I32Const(0)})},
		{"empty snapshot traps", "ludus_render of an empty snapshot",
			snapModule(snapMeta, renderFn([]byte{0x00}))},
		{"frame of the wrong size", "drew a 2x1 frame; the module declares 1x1 views",
			snapModule(snapMeta, renderFn(wrongFrame))},
		{"not a frame", "not an indexed8 view",
			snapModule(snapMeta, renderFn(wasmtest.I64Const(1024<<32|100)))},
		{"frame outside memory", "outside linear memory",
			snapModule(snapMeta, renderFn(noFrame))},
		{"snapshot format with raw views", `must render "indexed8" views`,
			snapModule(strings.Replace(snapMeta, `"indexed8"`, `"raw"`, 1), emptyOK(goodFrame))},
		{"snapshot format without a view size", "must declare view_width and view_height",
			snapModule(strings.Replace(snapMeta, `"view_width":1,`, "", 1), emptyOK(goodFrame))},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Validate(ctx, c.wasm)
			if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate: %v, want an invalid module error saying %q", err, c.want)
			}
		})
	}
	// ludus_render without a snapshot format: accepted and ignored.
	m, err := e.Compile(ctx, snapModule(noSnap, renderFn([]byte{0x00})))
	if err != nil {
		t.Fatal(err)
	}
	if m.HasRenderer || m.Meta.SnapshotFormat != "" {
		t.Fatal("a module without snapshot_format has a renderer")
	}
	if _, err := m.NewRenderer(ctx, InstanceOptions{}); !errors.Is(err, ErrNoRenderer) {
		t.Fatalf("NewRenderer: %v", err)
	}
	m, err = e.Compile(ctx, snapModule(snapMeta, emptyOK([]byte{0x00})))
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasRenderer {
		t.Fatal("HasRenderer is false")
	}
}

// recFunc9 is recFunc as function 9 (after the eight ABI functions and
// ludus_render): rec(n): if n { rec(n-1); rec(n-1) }.
var recFunc9 = wasmtest.Func{Params: []byte{wasmtest.I32}, Body: []byte{
	0x20, 0x00, 0x04, 0x40,
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x09,
	0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x09,
	0x0b}}

// TestHostileRenderer: a ludus_render that traps, runs away, returns memory it
// does not have or a frame of the wrong size fails that call with an error
// (within the deadline) and poisons that renderer only.
func TestHostileRenderer(t *testing.T) {
	for _, mode := range []Interrupt{InterruptFuel, InterruptFlag} {
		t.Run(mode.String(), func(t *testing.T) {
			e := hostileEngine(t, mode)
			ctx := context.Background()
			cases := []struct {
				name, want string
				render     *wasmtest.Func
				deadline   bool
			}{
				{"trap", "unreachable", emptyOK([]byte{0x00}), false},
				{"runaway loop", "deadline", emptyOK(wasmtest.Spin, wasmtest.I64Const(0)), true},
				{"runaway recursion", "deadline", emptyOK(wasmtest.I32Const(62), []byte{0x10, 0x09}, wasmtest.I64Const(0)), true},
				{"frame outside memory", "outside linear memory", emptyOK(noFrame), false},
				{"frame of the wrong size", "drew a 2x1 frame", emptyOK(wrongFrame), false},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if mode == InterruptFlag && c.deadline {
						t.Skip(flagTimerHazard)
					}
					m, err := e.Compile(ctx, snapModule(snapMeta, c.render, recFunc9))
					if err != nil {
						t.Fatal(err)
					}
					r, err := m.NewRenderer(ctx, InstanceOptions{MemoryLimitPages: 16})
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close(ctx)
					if f, err := r.Render(ctx, nil); err != nil || len(f) != abi.Indexed8HeaderSize+1 {
						t.Fatalf("empty snapshot: %d bytes, %v", len(f), err)
					}
					start := time.Now()
					_, ferr := r.Render(ctx, []byte("snapshot"))
					took := time.Since(start)
					err = ferr
					var te *TrapError
					if !errors.As(err, &te) || te.Export != abi.ExportRender || !strings.Contains(err.Error(), c.want) {
						t.Fatalf("Render: %v, want a TrapError in ludus_render saying %q", err, c.want)
					}
					if c.deadline && (!errors.Is(err, ErrDeadline) || took > 300*time.Millisecond+slack) {
						t.Fatalf("stopped after %v: %v", took, err)
					}
					// Poisoned: every later call fails at once, the memory is freed.
					if _, err2 := r.Render(ctx, nil); err2 != err || r.Err() != err || r.MemoryBytes() != 0 {
						t.Fatalf("after the failure: Render %v, Err %v, %d bytes", err2, r.Err(), r.MemoryBytes())
					}
					// Another renderer of the same module is unaffected.
					r2, err := m.NewRenderer(ctx, InstanceOptions{})
					if err != nil {
						t.Fatal(err)
					}
					defer r2.Close(ctx)
					if _, err := r2.Render(ctx, nil); err != nil {
						t.Fatal(err)
					}
					t.Logf("%v after %v", firstLine(ferr), took)
				})
			}
			// The engine still runs a healthy match.
			if hashes, _ := runArenaOn(t, e, 3, 20); len(hashes) != 20 {
				t.Fatal("the arena did not run after the hostile renderers")
			}
		})
	}
}

// BenchmarkArenaSnapshot is ludus_view of a player (the node's cost per
// player per frame when clients render), BenchmarkArenaRender ludus_render
// of a player snapshot (the client's, or the node's for thin clients), both
// in wazero with fuel instrumentation as on a node.
func BenchmarkArenaSnapshot(b *testing.B) {
	inst, _ := benchArena(b)
	ctx := context.Background()
	slot := 0
	for b.Loop() {
		if _, err := inst.View(ctx, slot); err != nil {
			b.Fatal(err)
		}
		slot = (slot + 1) % arena.MaxPlayers
	}
}

func BenchmarkArenaSnapshotSpectator(b *testing.B) {
	inst, _ := benchArena(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := inst.View(ctx, abi.SpectatorSlot); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkArenaRender(b *testing.B) {
	benchRender(b, 0, arena.MaxPlayers)
}

func BenchmarkArenaRenderSpectator(b *testing.B) {
	benchRender(b, abi.SpectatorSlot, abi.SpectatorSlot+1)
}

func benchRender(b *testing.B, from, to int) {
	inst, m := benchArena(b)
	ctx := context.Background()
	var snaps [][]byte
	for slot := from; slot < to; slot++ {
		v, err := inst.View(ctx, slot)
		if err != nil {
			b.Fatal(err)
		}
		snaps = append(snaps, bytes.Clone(v))
	}
	r, err := m.NewRenderer(ctx, InstanceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	i := 0
	for b.Loop() {
		if _, err := r.Render(ctx, snaps[i%len(snaps)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// benchArena is an 8-bot arena 100 ticks in.
func benchArena(b *testing.B) (*Instance, *Module) {
	ctx := context.Background()
	e, err := New(ctx, Config{CacheDir: cacheDir})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(ctx) })
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		b.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { inst.Close(ctx) })
	if err := inst.Init(ctx, 1, []byte(`{"bots":8}`)); err != nil {
		b.Fatal(err)
	}
	for range 100 {
		if _, err := inst.Step(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	return inst, m
}
