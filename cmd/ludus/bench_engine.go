package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/sdk"
	"ludus.dev/ludus/simnode/engine"
)

// The engine benches: `ludus bench engine`, `ludus bench capacity` and
// `ludus bench density` (docs/RATIONALE.md records their figures).

var benchCacheDir = func() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "ludus", "wazero-bench")
}()

const arenaBenchConfig = `{"bots":8,"score_limit":100000,"time_limit_s":36000}`

func init() {
	var (
		engDur  time.Duration
		engAlts bool
		capDur  time.Duration
		capTry  time.Duration
		capRaw  bool
		denDur  time.Duration
		denN    int
	)
	registerBench("engine", bench{
		summary: "arena with 8 bots: wasm vs native step and view, interruption overhead, replay, instantiation",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&engDur, "duration", 20*time.Second, "time spent sampling step and view")
			fs.BoolVar(&engAlts, "alternatives", false, "also measure the other interruption mechanisms (flag, wazero)")
			fs.StringVar(&benchCacheDir, "cache", benchCacheDir, "wazero compilation cache")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			return benchEngine(ctx, progress, engDur, engAlts)
		},
	})
	registerBench("capacity", withSnapshotMode(bench{
		summary: "concurrent 8-bot arena matches (views at 17.5 fps for 8 players) at p99 tick lateness <= 5 ms",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&capDur, "duration", 90*time.Second, "bound on the whole search")
			fs.DurationVar(&capTry, "trial", 6*time.Second, "length of one trial")
			fs.BoolVar(&capRaw, "raw", false, "measure bare engine instances on goroutines instead of a simnode.Node")
			fs.IntVar(&capWorkers, "workers", 0, "simnode.Config.Workers (0: GOMAXPROCS; a large value leaves scheduling to Go)")
			fs.StringVar(&benchCacheDir, "cache", benchCacheDir, "wazero compilation cache")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			if capRaw {
				return benchCapacity(ctx, progress, capDur, capTry)
			}
			return benchCapacityNode(ctx, progress, capDur, capTry)
		},
	}))
	registerBench("density", bench{
		summary: "1,000 matches of a minimal module (64 entities at 30 Hz), C and Go SDK builds",
		flags: func(fs *flag.FlagSet) {
			fs.DurationVar(&denDur, "duration", 10*time.Second, "measured time per module")
			fs.IntVar(&denN, "matches", 1000, "concurrent matches")
			fs.StringVar(&benchCacheDir, "cache", benchCacheDir, "wazero compilation cache")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			return benchDensity(ctx, progress, denN, denDur)
		},
	})
}

func p50(s []int64) int64 { return pct(s, 50) }

func pct(s []int64, p float64) int64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(math.Ceil(p/100*float64(len(c)))) - 1
	return c[min(max(i, 0), len(c)-1)]
}

func newBenchEngine(ctx context.Context, mode engine.Interrupt) (*engine.Engine, error) {
	return engine.New(ctx, engine.Config{CacheDir: benchCacheDir, Interrupt: mode})
}

// arenaMatch is an 8-bot arena match, in wasm or native. view is what a
// pixel client costs (the snapshot, drawn by the module's renderer);
// snapshot is what a snapshot client costs.
type arenaMatch interface {
	step(ctx context.Context) error
	view(ctx context.Context, slot int) error
	snapshot(ctx context.Context, slot int) error
}

type wasmArena struct {
	inst *engine.Instance
	rend *engine.Renderer
}

func (w wasmArena) step(ctx context.Context) error { _, err := w.inst.Step(ctx, nil); return err }
func (w wasmArena) view(ctx context.Context, slot int) error {
	snap, err := w.inst.View(ctx, slot)
	if err == nil {
		_, err = w.rend.Render(ctx, snap)
	}
	return err
}
func (w wasmArena) snapshot(ctx context.Context, slot int) error {
	_, err := w.inst.View(ctx, slot)
	return err
}

type nativeArena struct{ g *arena.Game }

func (n nativeArena) step(context.Context) error                 { sdk.StepEvents(n.g, nil); return nil }
func (n nativeArena) view(_ context.Context, slot int) error     { n.g.Frame(slot); return nil }
func (n nativeArena) snapshot(_ context.Context, slot int) error { n.g.View(slot); return nil }

func newWasmArena(ctx context.Context, m *engine.Module, seed uint64) (*engine.Instance, error) {
	inst, err := m.Instantiate(ctx, seed)
	if err != nil {
		return nil, err
	}
	if err := inst.Init(ctx, seed, []byte(arenaBenchConfig)); err != nil {
		inst.Close(ctx)
		return nil, err
	}
	return inst, nil
}

func benchEngine(ctx context.Context, progress io.Writer, dur time.Duration, alts bool) (map[string]any, error) {
	modes := []engine.Interrupt{engine.InterruptFuel, engine.InterruptNone}
	if alts {
		modes = append(modes, engine.InterruptFlag, engine.InterruptWazero)
	}
	type variant struct {
		name                string
		match               arenaMatch
		steps, views, snaps []int64
	}
	var variants []*variant
	mods := map[engine.Interrupt]*engine.Module{}
	for _, mode := range modes {
		e, err := newBenchEngine(ctx, mode)
		if err != nil {
			return nil, err
		}
		defer e.Close(ctx)
		fmt.Fprintf(progress, "compiling the arena (%v)...\n", mode)
		m, err := e.Compile(ctx, builtin.Arena)
		if err != nil {
			return nil, err
		}
		mods[mode] = m
		inst, err := newWasmArena(ctx, m, 1)
		if err != nil {
			return nil, err
		}
		defer inst.Close(ctx)
		rend, err := m.NewRenderer(ctx, engine.InstanceOptions{})
		if err != nil {
			return nil, err
		}
		defer rend.Close(ctx)
		variants = append(variants, &variant{name: mode.String(), match: wasmArena{inst, rend}})
	}
	g := arena.New()
	if err := g.Init(1, []byte(arenaBenchConfig)); err != nil {
		return nil, err
	}
	variants = append(variants, &variant{name: "native", match: nativeArena{g}})

	// Interleave the variants in short rounds so that noise from other processes
	// on the machine hits them alike; report medians.
	fmt.Fprintf(progress, "sampling step and view for %v...\n", dur)
	end := time.Now().Add(dur)
	for round := 0; time.Now().Before(end); round++ {
		for _, v := range variants {
			for k := 0; k < 35; k++ {
				t0 := time.Now()
				if err := v.match.step(ctx); err != nil {
					return nil, fmt.Errorf("%s: %w", v.name, err)
				}
				t1 := time.Now()
				v.steps = append(v.steps, int64(t1.Sub(t0)))
				if k%2 == 0 {
					if err := v.match.view(ctx, 0); err != nil {
						return nil, fmt.Errorf("%s: %w", v.name, err)
					}
					v.views = append(v.views, int64(time.Since(t1)))
					t2 := time.Now()
					if err := v.match.snapshot(ctx, 0); err != nil {
						return nil, fmt.Errorf("%s: %w", v.name, err)
					}
					v.snaps = append(v.snaps, int64(time.Since(t2)))
				}
			}
		}
	}
	res := map[string]any{}
	byName := map[string]*variant{}
	for _, v := range variants {
		byName[v.name] = v
	}
	on, off, nat := byName["fuel"], byName["none"], byName["native"]
	res["step_ns_p50"] = p50(on.steps)
	res["view_ns_p50"] = p50(on.views)
	res["snapshot_ns_p50"] = p50(on.snaps)
	res["native_snapshot_ns_p50"] = p50(nat.snaps)
	res["native_step_ns_p50"] = p50(nat.steps)
	res["native_view_ns_p50"] = p50(nat.views)
	// A tick of an 8-player match: one step and, every other tick, 8 views.
	tick := func(v *variant) float64 { return float64(p50(v.steps)) + 4*float64(p50(v.views)) }
	res["interrupt_overhead"] = round3(tick(on) / tick(off))
	res["interrupt"] = "fuel"
	res["samples"] = len(on.steps)
	res["wasm_vs_native_step"] = round3(float64(p50(on.steps)) / float64(p50(nat.steps)))
	res["wasm_vs_native_view"] = round3(float64(p50(on.views)) / float64(p50(nat.views)))
	if alts {
		for _, name := range []string{"none", "flag", "wazero"} {
			v := byName[name]
			res["alt_"+name+"_step_ns_p50"] = p50(v.steps)
			res["alt_"+name+"_view_ns_p50"] = p50(v.views)
			res["alt_"+name+"_overhead"] = round3(tick(v) / tick(off))
		}
	}

	m := mods[engine.InterruptFuel]
	// Replay: step only, from a fresh instance.
	fmt.Fprintln(progress, "replay...")
	var replayRates []float64
	var hashes [2][]uint64
	for run := 0; run < 3; run++ {
		inst, err := newWasmArena(ctx, m, 42)
		if err != nil {
			return nil, err
		}
		const ticks = 7000
		t0 := time.Now()
		for i := 0; i < ticks; i++ {
			if _, err := inst.Step(ctx, nil); err != nil {
				return nil, err
			}
		}
		replayRates = append(replayRates, ticks/time.Since(t0).Seconds())
		inst.Close(ctx)
	}
	slices.Sort(replayRates)
	res["replay_ticks_per_sec"] = int64(replayRates[1])
	res["replay_x_realtime"] = int64(replayRates[1] / arena.TickRate)

	// Determinism: a cold and a warm instance of the same match agree on every
	// state hash.
	m.Warm(2, engine.InstanceOptions{})
	waitWarm(m, 2, 10*time.Second)
	for run := 0; run < 2; run++ {
		var inst *engine.Instance
		var err error
		if run == 0 {
			inst, err = m.Instantiate(ctx, 9)
		} else {
			var warm bool
			inst, warm, err = m.Acquire(ctx, 9, engine.InstanceOptions{})
			if err == nil && !warm {
				err = fmt.Errorf("the warm pool was empty")
			}
		}
		if err != nil {
			return nil, err
		}
		if err := inst.Init(ctx, 9, []byte(arenaBenchConfig)); err != nil {
			return nil, err
		}
		for i := 0; i < 2000; i++ {
			if _, err := inst.Step(ctx, nil); err != nil {
				return nil, err
			}
			h, err := inst.StateHash(ctx)
			if err != nil {
				return nil, err
			}
			hashes[run] = append(hashes[run], h)
		}
		inst.Close(ctx)
	}
	res["deterministic"] = slices.Equal(hashes[0], hashes[1])

	// Cold instantiation (with _initialize, as a match would pay without the pool).
	fmt.Fprintln(progress, "instantiation...")
	var inst []int64
	for i := 0; i < 30; i++ {
		t0 := time.Now()
		in, err := m.Instantiate(ctx, uint64(i))
		if err != nil {
			return nil, err
		}
		inst = append(inst, int64(time.Since(t0)))
		in.Close(ctx)
	}
	res["instantiate_ms_p50"] = round3(float64(p50(inst)) / 1e6)

	// Warm acquire: take an instance every 40 ms from a pool of 4 refilled in the background.
	m.Warm(4, engine.InstanceOptions{})
	waitWarm(m, 4, 10*time.Second)
	var acq []int64
	var cold int
	for i := 0; i < 60; i++ {
		t0 := time.Now()
		in, warm, err := m.Acquire(ctx, uint64(i), engine.InstanceOptions{})
		if err != nil {
			return nil, err
		}
		acq = append(acq, int64(time.Since(t0)))
		if !warm {
			cold++
		}
		in.Close(ctx)
		time.Sleep(40 * time.Millisecond)
	}
	m.Warm(0, engine.InstanceOptions{})
	res["warm_acquire_us_p50"] = round3(float64(p50(acq)) / 1e3)
	res["warm_acquire_us_p99"] = round3(float64(pct(acq, 99)) / 1e3)
	res["warm_acquire_cold_fallbacks"] = cold

	// Memory of one 8-player match: heap growth per live instance after 100
	// ticks and a round of views (linear memory is on the Go heap).
	fmt.Fprintln(progress, "memory...")
	const n = 10
	before := heapInUse()
	var live []*engine.Instance
	for i := 0; i < n; i++ {
		in, err := newWasmArena(ctx, m, uint64(i))
		if err != nil {
			return nil, err
		}
		for k := 0; k < 100; k++ {
			if _, err := in.Step(ctx, nil); err != nil {
				return nil, err
			}
		}
		for s := 0; s < 8; s++ {
			if _, err := in.View(ctx, s); err != nil {
				return nil, err
			}
		}
		live = append(live, in)
	}
	after := heapInUse()
	res["instance_bytes"] = (after - before) / n
	res["instance_linear_memory_bytes"] = live[0].MemoryBytes()
	for _, in := range live {
		in.Close(ctx)
	}
	return res, nil
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

func waitWarm(m *engine.Module, n int, limit time.Duration) {
	end := time.Now().Add(limit)
	for m.WarmReady(engine.InstanceOptions{}) < n && time.Now().Before(end) {
		time.Sleep(5 * time.Millisecond)
	}
}

// benchCapacity (-raw) raises the number of concurrent 8-bot arena matches, each
// ticked by its own goroutine at 35 Hz with 8 views every other tick, until p99
// tick lateness exceeds 5 ms: the engine alone, without the node
// (benchCapacityNode is the default).
func benchCapacity(ctx context.Context, progress io.Writer, total, trial time.Duration) (map[string]any, error) {
	e, err := newBenchEngine(ctx, engine.InterruptFuel)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, builtin.Arena)
	if err != nil {
		return nil, err
	}
	const limit = 5 * time.Millisecond
	deadline := time.Now().Add(total)
	best, bestP99 := 0, time.Duration(0)
	tried := map[int]time.Duration{}
	tryN := func(n int) (time.Duration, error) {
		if p, ok := tried[n]; ok {
			return p, nil
		}
		p, err := capacityTrial(ctx, m, n, trial)
		if err != nil {
			return 0, err
		}
		tried[n] = p
		fmt.Fprintf(progress, "%d matches: p99 lateness %v\n", n, p)
		if p <= limit && n > best {
			best, bestP99 = n, p
		}
		return p, nil
	}
	// Grow geometrically, then bisect between the last good and first bad count.
	lo, hi := 0, 0
	for n := 2; time.Now().Add(trial).Before(deadline); n = n * 3 / 2 {
		p, err := tryN(n)
		if err != nil {
			return nil, err
		}
		if p > limit {
			hi = n
			break
		}
		lo = n
	}
	for hi > lo+1 && time.Now().Add(trial).Before(deadline) {
		mid := (lo + hi) / 2
		p, err := tryN(mid)
		if err != nil {
			return nil, err
		}
		if p <= limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	return map[string]any{
		"matches":         best,
		"players":         best * 8,
		"p99_lateness_ms": round3(float64(bestP99) / 1e6),
		"gomaxprocs":      runtime.GOMAXPROCS(0),
	}, nil
}

func capacityTrial(ctx context.Context, m *engine.Module, n int, dur time.Duration) (time.Duration, error) {
	insts := make([]*engine.Instance, n)
	for i := range insts {
		in, err := newWasmArena(ctx, m, uint64(i+1))
		if err != nil {
			return 0, err
		}
		defer in.Close(ctx)
		insts[i] = in
	}
	period := time.Second / arena.TickRate
	start := time.Now().Add(50 * time.Millisecond)
	warmup := start.Add(time.Second)
	end := start.Add(dur)
	var mu sync.Mutex
	var late []int64
	var firstErr error
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			// Stagger the matches across the tick period.
			base := start.Add(period * time.Duration(i) / time.Duration(n))
			for k := 0; ; k++ {
				due := base.Add(period * time.Duration(k))
				if due.After(end) {
					break
				}
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				l := time.Since(due)
				if due.After(warmup) {
					mine = append(mine, int64(l))
				}
				if _, err := in.Step(ctx, nil); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				if k%2 == 0 {
					for s := 0; s < 8; s++ {
						if _, err := in.View(ctx, s); err != nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
							return
						}
					}
				}
			}
			mu.Lock()
			late = append(late, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return time.Duration(pct(late, 99)), nil
}

// benchDensity runs n matches of the density module (64 entities bouncing in a
// 100×100 box at 30 Hz, no players) for the C and the Go SDK builds. Keys are
// prefixed with the module's language: c_matches, go_cpu_ms_per_match_sec, ...
func benchDensity(ctx context.Context, progress io.Writer, n int, dur time.Duration) (map[string]any, error) {
	res := map[string]any{}
	for _, mod := range []struct {
		name string
		wasm []byte
	}{{"c", builtin.DensityC}, {"go", builtin.DensityGo}} {
		fmt.Fprintf(progress, "density, %s module, %d matches for %v...\n", mod.name, n, dur)
		r, err := densityRun(ctx, mod.wasm, n, dur)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mod.name, err)
		}
		for k, v := range r {
			res[mod.name+"_"+k] = v
		}
	}
	return res, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func densityRun(ctx context.Context, wasm []byte, n int, dur time.Duration) (map[string]any, error) {
	e, err := newBenchEngine(ctx, engine.InterruptFuel)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	m, err := e.Compile(ctx, wasm)
	if err != nil {
		return nil, err
	}
	before := heapInUse()
	insts := make([]*engine.Instance, n)
	for i := range insts {
		in, err := m.Instantiate(ctx, uint64(i+1))
		if err != nil {
			return nil, err
		}
		if err := in.Init(ctx, uint64(i+1), nil); err != nil {
			return nil, err
		}
		insts[i] = in
	}
	defer func() {
		for _, in := range insts {
			in.Close(ctx)
		}
	}()
	mem := heapInUse() - before
	// One goroutine per P, each owning a share of the matches and ticking all of
	// them every 1/30 s (a late tick is run at once, not skipped).
	rate := m.Meta.TickRate
	period := time.Second / time.Duration(rate)
	workers := runtime.GOMAXPROCS(0)
	ticks := make([]int64, n)
	cpu0, t0 := cpuTime(), time.Now()
	end := t0.Add(dur)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; ; k++ {
				due := t0.Add(period * time.Duration(k))
				if due.After(end) {
					return
				}
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				for i := w; i < n; i += workers {
					if _, err := insts[i].Step(ctx, nil); err != nil {
						errs[w] = err
						return
					}
					ticks[i]++
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	slowest := slices.Min(ticks)
	// Check the work was done: every match's state differs from a fresh one.
	if h, err := insts[0].StateHash(ctx); err != nil || h == 0 {
		return nil, fmt.Errorf("state hash %x: %v", h, err)
	}
	return map[string]any{
		"matches":              n,
		"cpu_ms_per_match_sec": round3(float64(cpu) / 1e6 / (float64(n) * elapsed.Seconds())),
		"mb_per_match":         round3(float64(mem) / float64(n) / (1 << 20)),
		"slowest_tick_hz":      round3(float64(slowest) / elapsed.Seconds()),
		"tick_rate":            rate,
		"linear_memory_bytes":  insts[0].MemoryBytes(),
	}, nil
}
