package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/internal/wasmtest"
	"ludus.dev/ludus/sdk/abi"
)

// cacheDir is shared by the package's tests so the arena compiles once.
var cacheDir string

func TestMain(m *testing.M) {
	cacheDir = testenv.WazeroCacheDir()
	os.Exit(m.Run())
}

func newEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := New(context.Background(), Config{CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// TestValidateKeepsNothing: modules that are only checked (Validate,
// CompileTransient) leave the engine's cache as it was, and closing a
// transient module leaves a cached one of the same build usable.
func TestValidateKeepsNothing(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	for range 3 {
		if _, err := e.Validate(ctx, builtin.Pong); err != nil {
			t.Fatal(err)
		}
	}
	tm, err := e.CompileTransient(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := tm.Instantiate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	tm.Close(ctx)
	if _, ok := e.Module(BuildID(builtin.Pong)); ok {
		t.Fatal("a checked module stayed compiled in the engine")
	}
	m, err := e.Compile(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Validate(ctx, builtin.Pong); err != nil {
		t.Fatal(err)
	}
	again, err := e.CompileTransient(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	again.Close(ctx)
	inst, err = m.Instantiate(ctx, 1)
	if err != nil {
		t.Fatalf("the cached module after a transient one of its build closed: %v", err)
	}
	inst.Close(ctx)
}

func TestArenaValidates(t *testing.T) {
	e := newEngine(t)
	meta, err := e.Validate(context.Background(), builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name != "arena" || meta.TickRate != 35 || meta.MaxPlayers != 8 || meta.FrameDivisor != 2 || meta.ViewFormat != abi.Indexed8Format ||
		meta.SnapshotFormat != "arena-snap-v1" || meta.Inputs() != abi.InputState || meta.ViewWidth != 320 || meta.ViewHeight != 200 {
		t.Fatalf("unexpected arena metadata %+v", meta)
	}
	// Validate keeps nothing compiled: an upload's module is the backend's
	// only for the check (TestValidateKeepsNothing).
	if _, ok := e.Module(BuildID(builtin.Arena)); ok {
		t.Fatal("Validate left the module compiled in the engine")
	}
	m, err := e.Compile(context.Background(), builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasRenderer || !m.HasCheckpoint {
		t.Fatalf("arena: HasRenderer %v, HasCheckpoint %v", m.HasRenderer, m.HasCheckpoint)
	}
	// Modules without a snapshot format have no renderer, even when they
	// export ludus_render (density-go, through the Go SDK).
	for name, wasm := range map[string][]byte{"pong-c": builtin.Pong, "density-go": builtin.DensityGo} {
		m, err := e.Compile(context.Background(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		if m.HasRenderer {
			t.Errorf("%s: HasRenderer", name)
		}
		if _, err := m.NewRenderer(context.Background(), InstanceOptions{}); !errors.Is(err, ErrNoRenderer) {
			t.Errorf("%s: NewRenderer: %v", name, err)
		}
	}
}

// runArena steps an 8-bot arena for ticks and returns its state hash after every
// tick, its views (snapshots of every slot and the spectator) every 50 ticks,
// and every 250 ticks the frames a Renderer draws from them.
func runArena(t *testing.T, e *Engine, seed uint64, ticks int) (hashes []uint64, views [][]byte) {
	t.Helper()
	ctx := context.Background()
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	r, err := m.NewRenderer(ctx, InstanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := inst.Init(ctx, seed, []byte(`{"bots":8,"score_limit":1000,"time_limit_s":3600}`)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < ticks; i++ {
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		h, err := inst.StateHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
		if i%50 == 0 {
			for slot := abi.SpectatorSlot; slot < 8; slot++ {
				v, err := inst.View(ctx, slot)
				if err != nil {
					t.Fatal(err)
				}
				views = append(views, append([]byte(nil), v...))
				if i%250 != 0 {
					continue
				}
				f, err := r.Render(ctx, v)
				if err != nil {
					t.Fatalf("tick %d slot %d: %v", i, slot, err)
				}
				views = append(views, append([]byte(nil), f...))
			}
		}
	}
	return hashes, views
}

// TestDeterminism: the same seed and inputs give identical state hashes,
// identical snapshots and identical rendered frames in two fresh instances over
// 5,000 ticks with 8 bots.
func TestDeterminism(t *testing.T) {
	e := newEngine(t)
	ticks := 5000
	h1, v1 := runArena(t, e, 7, ticks)
	h2, v2 := runArena(t, e, 7, ticks)
	for i := range h1 {
		if h1[i] != h2[i] {
			t.Fatalf("state hashes diverge at tick %d: %x vs %x", i+1, h1[i], h2[i])
		}
	}
	for i := range v1 {
		if string(v1[i]) != string(v2[i]) {
			t.Fatalf("view %d differs between runs", i)
		}
	}
	h3, _ := runArena(t, e, 8, 200)
	same := 0
	for i := range h3 {
		if h3[i] == h1[i] {
			same++
		}
	}
	if same == len(h3) {
		t.Fatal("a different seed produced the same game: the seed is not used")
	}
}

func TestInputChangesView(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	run := func(mask byte) []byte {
		inst, err := m.Instantiate(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		if err := inst.Init(ctx, 3, nil); err != nil {
			t.Fatal(err)
		}
		evs := []abi.Event{{Kind: abi.EventJoin, Slot: 0, Payload: []byte("p")}}
		if _, err := inst.Step(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Step(ctx, []abi.Event{{Kind: abi.EventInput, Slot: 0, Payload: []byte{mask}}}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			if _, err := inst.Step(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		v, err := inst.View(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), v...)
	}
	if string(run(0)) == string(run(1<<2)) {
		t.Fatal("turning left for 20 ticks did not change the view")
	}
}

func TestRejectsBadModules(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	goodMeta := wasmtest.ABIFuncs(wasmtest.I64Const(0))
	withImport := func(mod, name string) []byte {
		return wasmtest.Module{Imports: []wasmtest.Import{{Module: mod, Name: name, Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}}},
			Funcs: goodMeta, MemoryPages: 1, ExportMemory: true}.Bytes()
	}
	cases := []struct {
		name string
		wasm []byte
		want string
	}{
		{"garbage", []byte("this is not wasm at all"), "not a valid WebAssembly module"},
		{"empty", nil, "not a valid WebAssembly module"},
		{"missing exports", wasmtest.Module{Funcs: goodMeta[:3], MemoryPages: 1, ExportMemory: true}.Bytes(), "missing the required export ludus_init"},
		{"wrong signature", wasmtest.Module{Funcs: append(append([]wasmtest.Func{}, goodMeta[:7]...),
			wasmtest.Func{Export: "ludus_result", Results: []byte{wasmtest.I32}, Body: wasmtest.I32Const(0)}), MemoryPages: 1, ExportMemory: true}.Bytes(), "exports ludus_result with signature () -> i32, want () -> i64"},
		{"socket import", withImport("wasi_snapshot_preview1", "sock_accept"), "imports wasi_snapshot_preview1.sock_accept"},
		{"file open import", withImport("wasi_snapshot_preview1", "path_open"), "path_open"},
		{"foreign module import", withImport("env", "system"), "imports env.system"},
		{"no memory", wasmtest.Module{Funcs: goodMeta}.Bytes(), `does not export its linear memory`},
		{"bad version", wasmtest.Module{Funcs: append([]wasmtest.Func{{Export: "ludus_abi_version", Results: []byte{wasmtest.I32}, Body: wasmtest.I32Const(7)}}, goodMeta[1:]...), MemoryPages: 1, ExportMemory: true}.Bytes(), "returned 7"},
		{"bad meta", wasmtest.Module{Funcs: goodMeta, MemoryPages: 1, ExportMemory: true}.Bytes(), "ludus_meta returned invalid JSON"},
		{"meta out of memory", wasmtest.Module{Funcs: append([]wasmtest.Func{goodMeta[0], {Export: "ludus_meta", Results: []byte{wasmtest.I64}, Body: wasmtest.I64Const(0x7fffff0000000100)}}, goodMeta[2:]...), MemoryPages: 1, ExportMemory: true}.Bytes(), "outside linear memory"},
		{"meta traps", wasmtest.Module{Funcs: append([]wasmtest.Func{goodMeta[0], {Export: "ludus_meta", Results: []byte{wasmtest.I64}, Body: []byte{0x00}}}, goodMeta[2:]...), MemoryPages: 1, ExportMemory: true}.Bytes(), "unreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Validate(ctx, tc.wasm)
			if err == nil {
				t.Fatal("module accepted")
			}
			if !errors.Is(err, ErrInvalidModule) {
				t.Fatalf("error %v does not wrap ErrInvalidModule", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add(wasmtest.Module{Funcs: wasmtest.ABIFuncs(wasmtest.I64Const(0)), MemoryPages: 1, ExportMemory: true}.Bytes())
	e, err := New(context.Background(), Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = e.Validate(context.Background(), b) // must not panic or hang
	})
}
