package engine

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/wasmtest"
)

// procStatus returns a size field of /proc/self/status (VmRSS, VmHWM) in bytes.
func procStatus(field string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		return kb << 10, err == nil
	}
	return 0, false
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux 4.0+).
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// fatDeep(): 64 v128 values live across an unbounded recursive call, the frame
// shape with the highest real-size / cost ratio we found (about 2/3).
func fatDeep() wasmtest.Func {
	b := []byte{0x41, 0x00} // the address of the v128.store below
	for j := 0; j < 64; j++ {
		b = append(b, 0xfd, 0x0c)
		for x := 0; x < 16; x++ {
			b = append(b, byte(j*16+x))
		}
	}
	b = append(b, 0x10, 0x08) // recurse
	for j := 1; j < 64; j++ {
		b = append(b, 0xfd, 0x51) // v128.xor
	}
	return wasmtest.Func{Body: append(b, 0xfd, 0x0b, 0x04, 0x00)} // v128.store
}

// TestDeepRecursionMemory: several unbounded recursions at once (native wasm
// calls, no loop, no memory.grow) each fail with a stack overflow naming the
// export and the tick, and the host's memory grows by at most their memory
// caps plus StackSlack each — not by the ~80 MiB per instance that wazero's
// own stack ceiling allows — both at the peak (VmHWM) and once they failed
// (heap in use: a failed instance must not keep its grown stack).
func TestDeepRecursionMemory(t *testing.T) {
	if _, ok := procStatus("VmRSS"); !ok || !resetPeakRSS() {
		t.Skip("needs /proc/self/status and /proc/self/clear_refs")
	}
	for _, tc := range []struct {
		name string
		fn   wasmtest.Func
	}{{"tiny frames", wasmtest.DeepFunc}, {"fat frames", fatDeep()}} {
		t.Run(tc.name, func(t *testing.T) {
			e := undeadlinedEngine(t)
			ctx := context.Background()
			const n = 4
			const capPages = 16 // 1 MiB of linear memory per match
			const perMatch = capPages*65536 + StackSlack
			wasm := wasmtest.Hostile("ludus_step", wasmtest.Cat([]byte{0x10, 0x08}, wasmtest.I32Const(0)), tc.fn)
			insts := make([]*Instance, n)
			for i := range insts {
				insts[i] = startHostile(t, e, wasm, InstanceOptions{MemoryLimitPages: capPages})
			}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			debug.FreeOSMemory()
			runtime.ReadMemStats(&ms0)
			rss0, _ := procStatus("VmRSS")
			resetPeakRSS()

			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, inst := range insts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = inst.Step(ctx, nil)
				}()
			}
			wg.Wait()
			peak, _ := procStatus("VmHWM")
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			grew, kept := peak-rss0, int64(ms1.HeapInuse)-int64(ms0.HeapInuse)
			t.Logf("%d at once: RSS %.1f MiB, peak +%.1f MiB; heap in use after GC %+.1f MiB; budget %d × (%d KiB + %d KiB) = %.1f MiB",
				n, mib(rss0), mib(grew), mib(kept), n, capPages*64, StackSlack>>10, mib(n*perMatch))
			for i, err := range errs {
				var te *TrapError
				if !errors.As(err, &te) || te.Export != "ludus_step" || te.Tick != 0 || !errors.Is(err, ErrStackOverflow) ||
					!strings.Contains(err.Error(), "stack overflow") {
					t.Errorf("match %d: %v; want a stack overflow in ludus_step at tick 0", i, err)
				}
			}
			if grew > n*perMatch {
				t.Errorf("peak RSS grew by %.1f MiB; want at most %.1f MiB", mib(grew), mib(n*perMatch))
			}
			if kept > n<<20 {
				t.Errorf("the failed instances still hold %.1f MiB of heap", mib(kept))
			}
		})
	}
}

// exitPaths is a module whose step leaves counted functions by every way
// there is, 100,000 times: falling off the end, return, br to the function's
// label, br_if and br_table to it, and a function with two results. A way
// out that did not give the frame's cost back would overdraw the budget.
func exitPaths() []byte {
	const leaf = 8
	extra := []wasmtest.Func{
		{Results: []byte{wasmtest.I32}, Body: wasmtest.I32Const(1)},                                                                       // 8: leaf
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x10, leaf}},                                           // 9: end
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x10, leaf, 0x0f}},                                     // 10: return
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x10, leaf, 0x0c, 0x00}},                               // 11: br 0
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x10, leaf, 0x20, 0x00, 0x0d, 0x00, 0x1a, 0x41, 0x02}}, // 12: br_if 0
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x10, leaf, 0x20, 0x00, 0x0e, 0x01, 0x00, 0x00}},       // 13: br_table 0 0
		// 14: two results, out by br_if 0 or return
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32, wasmtest.I64}, Body: []byte{0x10, leaf, 0x42, 0x05, 0x20, 0x00, 0x0d, 0x00, 0x0f}},
		// 15: nested blocks, out by br 2 from inside
		{Params: []byte{wasmtest.I32}, Results: []byte{wasmtest.I32}, Body: []byte{0x02, 0x40, 0x02, 0x40, 0x10, leaf, 0x0c, 0x02, 0x0b, 0x0b, 0x41, 0x00}},
	}
	// step: for n := 100000; n != 0; n-- { f(n&1) for every f }
	step := wasmtest.Cat(wasmtest.I32Const(100000), []byte{0x21, 0x00, 0x03, 0x40})
	for f := byte(9); f <= 15; f++ {
		step = append(step, 0x20, 0x00, 0x41, 0x01, 0x71, 0x10, f, 0x1a)
		if f == 14 {
			step = append(step, 0x1a)
		}
	}
	step = append(step, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x22, 0x00, 0x0d, 0x00, 0x0b)
	return wasmtest.Hostile("ludus_step", wasmtest.Cat(step, wasmtest.I32Const(0)), extra...)
}

func stackLeft(t *testing.T, inst *Instance) int64 {
	t.Helper()
	g := inst.mod.ExportedGlobal(stackExport)
	if g == nil {
		t.Fatal("the instance has no stack budget")
	}
	return int64(g.Get())
}

// TestStackBudgetRestored: after calls that leave functions by every way out,
// and after a real game's steps, views, checkpoints and renders, the stack
// budget is whole again.
func TestStackBudgetRestored(t *testing.T) {
	e := undeadlinedEngine(t)
	ctx := context.Background()
	inst := startHostile(t, e, exitPaths(), InstanceOptions{})
	for range 3 {
		if _, err := inst.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if left := stackLeft(t, inst); left != StackLimit {
			t.Fatalf("after a step the stack budget is %d; want %d", left, StackLimit)
		}
	}

	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	a, err := m.Instantiate(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	r, err := m.NewRenderer(ctx, InstanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if err := a.Init(ctx, 7, []byte(`{"bots":8}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := a.Step(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			v, err := a.View(ctx, i%8)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Render(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	cp, err := a.Save(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Load(ctx, a.Tick(), cp); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]*Instance{"arena": a, "renderer": r.inst} {
		if left := stackLeft(t, in); left != StackLimit {
			t.Errorf("%s: the stack budget is %d after its calls; want %d", name, left, StackLimit)
		}
	}
}

// buildDeepGo builds testdata/deepgo, a Go SDK game whose step recurses
// through an ordinary Go function as deep as its config says.
func buildDeepGo(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("building a Go wasm module is slow")
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	out := filepath.Join(t.TempDir(), "deepgo.wasm")
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out, "./testdata/deepgo")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// walk is testdata/deepgo's recursive function, natively.
func walk(n int, acc uint64) uint64 {
	if n == 0 {
		return acc
	}
	var pad [4]uint64
	pad[n&3] = acc*31 + uint64(n)
	return walk(n-1, pad[0]^pad[1]^pad[2]^pad[3]) + 1
}

// TestLegitimateRecursion: a Go game that recurses 1,000 and 2,500 frames deep
// every step (in native wasm calls, as Go compiles calls) runs and computes
// what native Go does; one that recurses 1,000,000 deep fails with a stack
// overflow, not with the Go runtime's own error after it grew its stack in
// linear memory.
func TestLegitimateRecursion(t *testing.T) {
	wasm := buildDeepGo(t)
	e := undeadlinedEngine(t)
	ctx := context.Background()
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	for _, depth := range []int{1000, 2500} {
		inst, err := m.Instantiate(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer inst.Close(ctx)
		if err := inst.Init(ctx, 3, []byte(strconv.Itoa(depth))); err != nil {
			t.Fatal(err)
		}
		want := uint64(3)
		for range 5 {
			if _, err := inst.Step(ctx, nil); err != nil {
				t.Fatalf("depth %d: %v", depth, err)
			}
			want = walk(depth, want)
		}
		if h, err := inst.StateHash(ctx); err != nil || h != want {
			t.Fatalf("depth %d: hash %x, %v; want %x", depth, h, err, want)
		}
	}
	inst, err := m.InstantiateWith(ctx, 3, InstanceOptions{MemoryLimitPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, 3, []byte("1000000")); err != nil {
		t.Fatal(err)
	}
	_, err = inst.Step(ctx, nil)
	var te *TrapError
	if !errors.As(err, &te) || te.Export != "ludus_step" || !errors.Is(err, ErrStackOverflow) {
		t.Fatalf("a recursion 1,000,000 deep: %v; want a stack overflow", err)
	}
	t.Log(firstLine(err))
}

// wazeroStack returns how much of its stack a wazero compiler-engine call of
// fn is using, read from fn's private state (stackTop, and the stack pointer
// saved when the guest called the host): test-only, to check frame costs
// against the real frames.
func wazeroStack(t *testing.T, fn api.Function) func() int64 {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		t.Fatalf("wazero's function is a %v; re-check frame costs another way", v.Type())
	}
	top, ectx := v.Elem().FieldByName("stackTop"), v.Elem().FieldByName("execCtx")
	if !top.IsValid() || !ectx.IsValid() || !ectx.FieldByName("stackPointerBeforeGoCall").IsValid() {
		t.Fatalf("wazero's %v changed; re-check frame costs another way", v.Type())
	}
	sp := ectx.FieldByName("stackPointerBeforeGoCall")
	return func() int64 { return int64(top.Uint()) - int64(sp.Pointer()) }
}

// TestFrameCostCoversWazeroFrames: for real modules (the Go arena, the C pong)
// and for the frame shapes that make wazero's frames biggest relative to
// their code (values live across the recursive call: locals, operand stack,
// v128 constants and splats; phis of nested loops and ifs; many results),
// the stack a call really uses never exceeds the budget it was charged.
// Failing after a wazero upgrade means the frame costs need re-measuring.
func TestFrameCostCoversWazeroFrames(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	var (
		used         func() int64
		worst        float64
		worstA, wEst int64
	)
	_, err := rt.NewHostModuleBuilder(hostModule).NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, _ []uint64) {
		if used != nil {
			actual := used()
			charged := StackLimit - int64(mod.ExportedGlobal(stackExport).Get())
			// Below a few frames the trampolines' fixed size dominates.
			if actual > 4096 && float64(actual)/float64(charged) > worst {
				worst, worstA, wEst = float64(actual)/float64(charged), actual, charged
			}
		}
		mod.ExportedGlobal(counterExport).(api.MutableGlobal).Set(1) // look at every check
	}), nil, nil).Export(hostRefill).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, wasm []byte, calls func(call func(string, ...uint64))) {
		t.Helper()
		worst, worstA, wEst = 0, 0, 0
		out, err := instrument(wasm, codeFuel)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
		if err != nil {
			t.Fatal(err)
		}
		defer mod.Close(ctx)
		calls(func(fname string, params ...uint64) {
			fn := mod.ExportedFunction(fname)
			used = wazeroStack(t, fn)
			_, err := fn.Call(ctx, params...)
			used = nil
			if err != nil {
				t.Fatalf("%s %s: %v", name, fname, err)
			}
		})
		t.Logf("%s: the real stack was at most %.2f of the budget charged (%d of %d bytes)", name, worst, worstA, wEst)
		if worst > 1 {
			t.Errorf("%s: a call used %d bytes of real stack but was charged %d", name, worstA, wEst)
		}
	}
	for name, f := range map[string]wasmtest.Func{
		"locals": shapeLocals(200), "operand stack": shapeStack(200), "v128 constants": shapeV128(100),
		"v128 splats": shapeSplat(100), "loop phis": shapePhi(60, 60), "if phis": shapeIf(60, 60), "results": shapeArity(300),
	} {
		step := wasmtest.Cat(wasmtest.I32Const(300), []byte{0x10, 0x08}, bytesOf(0x1a, len(f.Results)), wasmtest.I32Const(0))
		run(name, wasmtest.Hostile("ludus_step", step, f), func(call func(string, ...uint64)) { call("ludus_step", 0) })
	}
	game := func(call func(string, ...uint64)) {
		call("ludus_init", 1, 0)
		for range 20 {
			call("ludus_step", 0)
		}
		call("ludus_view", 0)
		call("ludus_state_hash")
	}
	run("arena", builtin.Arena, func(call func(string, ...uint64)) { call("_initialize"); game(call) })
	run("pong", builtin.Pong, game)
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// Frame shapes for TestFrameCostCoversWazeroFrames: rec(n) recurses n deep
// through recTail with values live across the call, and stores what it
// computed so the compiler cannot drop them.
var recTail = []byte{0x20, 0x00, 0x04, 0x40, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x08, 0x0b}

func setLocals(b []byte, k int) []byte {
	for j := 1; j <= k; j++ {
		b = append(b, 0x20, 0x00, 0xad)
		b = append(b, wasmtest.I64Const(int64(j))...)
		b = append(b, 0x7c, 0x21)
		b = append(b, wasmtest.LEB(uint32(j))...)
	}
	return b
}

func sumLocals(b []byte, k int) []byte {
	b = append(b, 0x41, 0x00, 0x20, 0x01)
	for j := 2; j <= k; j++ {
		b = append(b, 0x20)
		b = append(b, wasmtest.LEB(uint32(j))...)
		b = append(b, 0x7c)
	}
	return append(b, 0x37, 0x03, 0x00) // i64.store
}

// k i64 locals set before the call and summed after it.
func shapeLocals(k int) wasmtest.Func {
	b := append(setLocals(nil, k), recTail...)
	return wasmtest.Func{Params: []byte{wasmtest.I32}, NLocals: uint32(k), LocalType: wasmtest.I64, Body: sumLocals(b, k)}
}

// k i64 values on the operand stack across the call.
func shapeStack(k int) wasmtest.Func {
	b := []byte{0x41, 0x00}
	for j := 1; j <= k; j++ {
		b = append(b, 0x20, 0x00, 0xad)
		b = append(b, wasmtest.I64Const(int64(j))...)
		b = append(b, 0x7c)
	}
	b = append(b, recTail...)
	b = append(b, bytesOf(0x7c, k-1)...)
	return wasmtest.Func{Params: []byte{wasmtest.I32}, Body: append(b, 0x37, 0x03, 0x00)}
}

// k v128.const values on the operand stack across the call.
func shapeV128(k int) wasmtest.Func {
	b := []byte{0x41, 0x00}
	for j := 1; j <= k; j++ {
		b = append(b, 0xfd, 0x0c)
		for x := 0; x < 16; x++ {
			b = append(b, byte(j+x))
		}
	}
	b = append(b, recTail...)
	for j := 2; j <= k; j++ {
		b = append(b, 0xfd, 0x51)
	}
	return wasmtest.Func{Params: []byte{wasmtest.I32}, Body: append(b, 0xfd, 0x0b, 0x04, 0x00)}
}

// k i8x16.splat values on the operand stack across the call.
func shapeSplat(k int) wasmtest.Func {
	b := []byte{0x41, 0x00}
	for j := 1; j <= k; j++ {
		b = append(b, 0x20, 0x00, 0xfd, 0x0f)
	}
	b = append(b, recTail...)
	for j := 2; j <= k; j++ {
		b = append(b, 0xfd, 0x51)
	}
	return wasmtest.Func{Params: []byte{wasmtest.I32}, Body: append(b, 0xfd, 0x0b, 0x04, 0x00)}
}

// modify adds local j+1 to local j, for each of l locals.
func modify(b []byte, l int) []byte {
	for j := 1; j <= l; j++ {
		b = append(b, 0x20)
		b = append(b, wasmtest.LEB(uint32(j))...)
		b = append(b, 0x20)
		b = append(b, wasmtest.LEB(uint32(j%l+1))...)
		b = append(b, 0x7c, 0x21)
		b = append(b, wasmtest.LEB(uint32(j))...)
	}
	return b
}

// nest loops, the innermost modifying all l locals (a phi per local per loop).
func shapePhi(l, nest int) wasmtest.Func {
	b := setLocals(nil, l)
	b = append(b, bytesOf2(0x03, 0x40, nest)...)
	b = modify(b, l)
	for range nest {
		b = append(b, 0x20, 0x01, 0x50, 0x0d, 0x00, 0x0b) // br_if 0 when local 1 is 0: never
	}
	b = append(b, recTail...)
	return wasmtest.Func{Params: []byte{wasmtest.I32}, NLocals: uint32(l), LocalType: wasmtest.I64, Body: sumLocals(b, l)}
}

// nest ifs, the innermost modifying all l locals (a phi per local per if).
func shapeIf(l, nest int) wasmtest.Func {
	b := setLocals(nil, l)
	for range nest {
		b = append(b, 0x20, 0x00, 0x04, 0x40)
	}
	b = modify(b, l)
	b = append(b, bytesOf(0x0b, nest)...)
	b = append(b, recTail...)
	return wasmtest.Func{Params: []byte{wasmtest.I32}, NLocals: uint32(l), LocalType: wasmtest.I64, Body: sumLocals(b, l)}
}

// r(n) returns r i64 values: zeros when n is 0, else r(n-1)'s.
func shapeArity(r int) wasmtest.Func {
	b := []byte{0x20, 0x00, 0x45, 0x04, 0x40}
	b = append(b, bytesOf2(0x42, 0x00, r)...)
	b = append(b, 0x0f, 0x0b, 0x20, 0x00, 0x41, 0x01, 0x6b, 0x10, 0x08)
	return wasmtest.Func{Params: []byte{wasmtest.I32}, Results: bytesOf(wasmtest.I64, r), Body: b}
}

func bytesOf2(a, b byte, n int) []byte {
	out := make([]byte, 0, 2*n)
	for range n {
		out = append(out, a, b)
	}
	return out
}
