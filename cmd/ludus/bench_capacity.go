package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/gateway/framecodec"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
)

// `ludus bench capacity` on the node's real path: an in-process etcd (no
// fsync), one simnode.Node per trial with the arena served by a static module
// source, N arena matches (one tenant each) started through Node.StartGame,
// each with 8 players who join through the actor, send inputs (random held
// buttons, acknowledged once durable in etcd) and watch their own view
// (in-process subscribers: the frames a gateway stream would carry, without
// the network). Lateness is the node's ludus_tick_lateness_seconds histogram,
// counted from one second after the matches started to the end of the trial.
// A trial passes when p99 lateness <= 5 ms and the node dropped at most 1% of
// the frames due (views skipped because their tick was late).
//
// Snapshot mode (bench_snapshot_capacity.go) runs the same trial with every
// player watching its snapshot, published every tick, through a consumer that
// encodes each one with the gateway's per-stream codec (framecodec.Stream,
// delta + deflate, keyframes every 2 s) unless -snapshot-encode=false. A
// snapshot trial passes when p99 lateness <= 5 ms and the consumers received
// at least 99% of the snapshots due (8 per tick); a failing snapshot trial is
// run again (-snapshot-retries, default once) before its count counts as
// failed, and every run is listed in snapshot_trials.

// capWorkers is simnode.Config.Workers for the trials (-workers).
var capWorkers int

type staticArena struct{}

func (staticArena) FetchModule(_ context.Context, _, buildID string) ([]byte, error) {
	if buildID != engine.BuildID(builtin.Arena) {
		return nil, fmt.Errorf("no module %s", buildID)
	}
	return builtin.Arena, nil
}

type nodeBench struct {
	eng  *engine.Engine
	cli  *clusterstate.Client
	runs int
}

// newNodeBench starts what every trial shares: an in-process etcd (no fsync)
// and an engine with the arena compiled. release frees them.
func newNodeBench(ctx context.Context) (b *nodeBench, release func(), err error) {
	var closers []func()
	release = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	dir, err := os.MkdirTemp("", "ludus-bench-capacity")
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { os.RemoveAll(dir) })
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir, NoFsync: true})
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { es.Close() })
	raw, err := es.Client()
	if err != nil {
		return nil, nil, err
	}
	cli := clusterstate.New(raw)
	closers = append(closers, func() { cli.Close() })
	e, err := newBenchEngine(ctx, engine.InterruptFuel)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { e.Close(context.Background()) })
	if _, err := e.Compile(ctx, builtin.Arena); err != nil {
		return nil, nil, err
	}
	return &nodeBench{eng: e, cli: cli}, release, nil
}

func benchCapacityNode(ctx context.Context, progress io.Writer, total, trial time.Duration) (map[string]any, error) {
	b, closeBench, err := newNodeBench(ctx)
	if err != nil {
		return nil, err
	}
	defer closeBench()
	const limit = 5 * time.Millisecond
	deadline := time.Now().Add(total)
	best := trialResult{}
	tried := map[int]trialResult{}
	tryN := func(n int) (bool, error) {
		r, ok := tried[n]
		if !ok {
			var err error
			r, err = b.trial(ctx, n, trial, viewPixels)
			if err != nil {
				return false, err
			}
			tried[n] = r
			if r.failure != "" {
				fmt.Fprintf(progress, "%d matches: failed: %s\n", n, r.failure)
			}
			fmt.Fprintf(progress, "%d matches: p99 lateness %.3f ms, frames dropped %.2f%%, frames delivered %.1f/s per player, ticks %.1f/s per match, other processes %.2f cores\n",
				n, r.p99ms, r.droppedPct, r.fps, r.tickHz, r.others)
		}
		ok = r.failure == "" && r.p99ms <= float64(limit)/1e6 && r.droppedPct <= 1
		if ok && n > best.matches {
			best = r
		}
		return ok, nil
	}
	lo, hi := 0, 0
	for n := 2; time.Now().Add(trial + 3*time.Second).Before(deadline); n = n * 3 / 2 {
		ok, err := tryN(n)
		if err != nil {
			return nil, err
		}
		if !ok {
			hi = n
			break
		}
		lo = n
	}
	for hi > lo+1 && time.Now().Add(trial+3*time.Second).Before(deadline) {
		mid := (lo + hi) / 2
		ok, err := tryN(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return map[string]any{
		"matches":             best.matches,
		"players":             best.matches * 8,
		"p99_lateness_ms":     round3(best.p99ms),
		"frames_dropped_pct":  round3(best.droppedPct),
		"frames_per_s_player": round3(best.fps),
		"path":                "simnode.Node (actors, scheduler, etcd log writer; in-process viewers)",
		"gomaxprocs":          runtime.GOMAXPROCS(0),
		"workers":             cmp.Or(capWorkers, runtime.GOMAXPROCS(0)),
		// New with snapshot mode: process CPU at that count, per match-second.
		"pixel_cpu_ms_per_match_sec": round3(best.cpuMs),
		"pixel_other_cores_busy":     round3(best.others),
	}, nil
}

// viewMode is what each player of a capacity trial watches.
type viewMode int

const (
	// viewPixels: node.Watch, one frame every frame_divisor ticks drawn by the
	// module's renderer on the node.
	viewPixels viewMode = iota
	// viewSnapshots: node.WatchMode(snapshots), the player's snapshot every
	// tick, read by a consumer that encodes it as the gateway would when
	// capSnapEncode is set.
	viewSnapshots
)

type trialResult struct {
	matches    int
	p99ms      float64
	droppedPct float64
	fps        float64 // frames (or snapshots) delivered per player per second
	tickHz     float64 // ticks per match per second
	// cpuMs is the process's CPU time (node, in-process etcd, the bench's
	// players and consumers) per match-second; tickMs the node's time in
	// ticks (ludus_tick_seconds_total) per match-second.
	cpuMs, tickMs float64
	// Snapshot trials: the share of due snapshots (ticks × 8 players) the
	// consumers received, and the encoded bytes per player-second.
	deliveredPct float64
	bytesPerSec  float64
	setup        time.Duration // starting the matches and seating the players
	// others is how many cores other processes kept busy during the window
	// (the machine's busy time from /proc/stat minus this process's).
	others float64
	// failure, if set, is why the trial failed whatever its figures: a match
	// did not start or stopped (the node's first warnings attached).
	failure string
}

// firstBytes keeps the first max bytes written to it (a bounded log).
type firstBytes struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (f *firstBytes) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if room := f.max - len(f.b); room > 0 {
		f.b = append(f.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (f *firstBytes) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.b) == 0 {
		return "nothing logged"
	}
	return strings.TrimSpace(string(f.b))
}

// machineBusy is the time all cores of the machine spent busy so far (Linux
// /proc/stat: every state but idle and iowait, in 1/100 s); 0 elsewhere.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return statBusy(string(b))
}

// statBusy reads the busy time from the first line of /proc/stat.
func statBusy(stat string) time.Duration {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		// user nice system idle iowait irq softirq steal (guest time is
		// already in user): skip idle (3) and iowait (4), and guest fields.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * (time.Second / 100)
}

// capSetupWorkers bounds how many matches a trial sets up at once (StartGame,
// then its 8 joins, each answered once durable, in parallel).
const capSetupWorkers = 16

func (b *nodeBench) trial(ctx context.Context, n int, dur time.Duration, mode viewMode) (trialResult, error) {
	b.runs++
	reg := prometheus.NewRegistry()
	warns := &firstBytes{max: 2048} // the node's first warnings and errors
	node, err := simnode.New(simnode.Config{
		ID: fmt.Sprintf("bench-%d", b.runs), Addr: "http://127.0.0.1:1", Etcd: b.cli, Engine: b.eng, Modules: staticArena{},
		Capacity: n + 1, Metrics: reg, ClusterToken: "bench", Workers: capWorkers,
		Logger: slog.New(slog.NewTextHandler(warns, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return trialResult{}, err
	}
	if err := node.Start(ctx); err != nil {
		return trialResult{}, err
	}
	defer func() {
		// Bounded: a node that cannot stop its games within a minute ends the
		// trial anyway (its goroutines die with the process).
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		node.Close(cctx)
		cancel()
	}()
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buildID := engine.BuildID(builtin.Arena)
	var frames, encBytes atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// watch is one player's viewer: what a gateway stream of that player reads.
	watch := func(tenant, id, account string) {
		if mode == viewPixels {
			_ = node.Watch(tctx, tenant, id, account, func(simnode.Frame) { frames.Add(1) })
			return
		}
		st := framecodec.NewStream([]ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE})
		st.Status(&ludusv1.Status{TickRate: arena.TickRate})
		count := func(f *ludusv1.Frame) error { encBytes.Add(int64(len(f.View))); return nil }
		_ = node.WatchMode(tctx, tenant, id, account, true, func(f simnode.Frame) {
			frames.Add(1)
			if capSnapEncode {
				_ = st.Send(&ludusv1.Frame{Tick: f.Tick, View: f.View}, count)
			}
		})
	}
	setupStart := time.Now()
	// Setup is bounded too: 30 s plus 100 ms per match.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*100*time.Millisecond)
	defer scancel()
	sem := make(chan struct{}, capSetupWorkers)
	errs := make(chan error, n*(1+arena.MaxPlayers))
	var setup sync.WaitGroup
	for i := range n {
		setup.Add(1)
		sem <- struct{}{}
		go func() {
			defer setup.Done()
			defer func() { <-sem }()
			tenant, id := fmt.Sprintf("tenant%d", i), fmt.Sprintf("m%d-%d", b.runs, i)
			if _, err := node.StartGame(sctx, clusterstate.GameSpec{TenantID: tenant, GameID: id, BuildID: buildID,
				Seed: uint64(i + 1), Config: []byte(arenaBenchConfig)}); err != nil {
				errs <- fmt.Errorf("start match %d: %w", i, err)
				return
			}
			var joins sync.WaitGroup
			for p := range arena.MaxPlayers {
				joins.Add(1)
				go func() {
					defer joins.Done()
					account := fmt.Sprintf("player%d", p)
					if _, err := node.Join(sctx, tenant, id, account, account); err != nil {
						errs <- fmt.Errorf("join match %d: %w", i, err)
						return
					}
					wg.Add(2)
					go func() {
						defer wg.Done()
						watch(tenant, id, account)
					}()
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(i), uint64(p)))
						for seq := uint64(1); tctx.Err() == nil; seq++ {
							// Held buttons change every 100-400 ms, like a player.
							select {
							case <-tctx.Done():
								return
							case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
							}
							if node.Input(tctx, tenant, id, account, seq, []byte{byte(rng.IntN(256))}) != nil {
								return
							}
						}
					}()
				}()
			}
			joins.Wait()
		}()
	}
	setup.Wait()
	close(errs)
	if err := <-errs; err != nil {
		if ctx.Err() != nil {
			return trialResult{}, ctx.Err()
		}
		// A node that loses matches while they start is over capacity: the
		// trial fails (with why), the bench goes on.
		return trialResult{matches: n, failure: fmt.Sprintf("%v (node log: %s)", err, warns)}, nil
	}
	setupTime := time.Since(setupStart)
	time.Sleep(time.Second)
	m0, err := gatherBench(reg)
	if err != nil {
		return trialResult{}, err
	}
	f0, b0, c0, s0 := frames.Load(), encBytes.Load(), cpuTime(), machineBusy()
	start := time.Now()
	time.Sleep(dur)
	m1, err := gatherBench(reg)
	if err != nil {
		return trialResult{}, err
	}
	f1, b1, c1, s1 := frames.Load(), encBytes.Load(), cpuTime(), machineBusy()
	running := m1.games
	el := time.Since(start).Seconds()
	h0, h1 := m0.lateness, m1.lateness
	cnt := h1.GetSampleCount() - h0.GetSampleCount()
	players := float64(n * arena.MaxPlayers)
	r := trialResult{
		matches: n,
		p99ms:   histQuantile(h0, h1, 0.99) * 1000,
		fps:     float64(f1-f0) / el / players,
		tickHz:  float64(cnt) / el / float64(n),
		cpuMs:   (c1 - c0).Seconds() * 1000 / el / float64(n),
		tickMs:  (m1.tickSeconds - m0.tickSeconds) * 1000 / el / float64(n),
		setup:   setupTime,
		others:  math.Max(0, (s1-s0-(c1-c0)).Seconds()/el),
	}
	if running < float64(n) {
		r.failure = fmt.Sprintf("%d of %d matches stopped during the trial (node log: %s)", n-int(running), n, warns)
	}
	if mode == viewPixels {
		due := float64(cnt) / arena.FrameDivisor * arena.MaxPlayers // views due in the window
		r.droppedPct = 100 * (m1.dropped - m0.dropped) * arena.MaxPlayers / math.Max(due, 1)
	} else {
		// A snapshot is due for every player on every tick.
		due := float64(cnt) * arena.MaxPlayers
		r.deliveredPct = 100 * float64(f1-f0) / math.Max(due, 1)
		r.bytesPerSec = float64(b1-b0) / el / players
	}
	return r, nil
}

// benchMetrics is what a trial reads from the node's registry.
type benchMetrics struct {
	lateness *dto.Histogram
	// dropped counts frame ticks whose views were not rendered because the
	// tick was late (one per tick, whatever the number of views).
	dropped float64
	// tickSeconds is the time games spent ticking on a worker.
	tickSeconds float64
	// games is how many games the node runs.
	games float64
}

// gatherBench reads the node's lateness histogram, its dropped-frame count
// and the time its games spent ticking.
func gatherBench(reg *prometheus.Registry) (benchMetrics, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return benchMetrics{}, err
	}
	var m benchMetrics
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ludus_tick_lateness_seconds":
			m.lateness = mf.GetMetric()[0].GetHistogram()
		case "ludus_frames_dropped_total":
			for _, x := range mf.GetMetric() {
				m.dropped += x.GetCounter().GetValue()
			}
		case "ludus_tick_seconds_total":
			for _, x := range mf.GetMetric() {
				m.tickSeconds += x.GetCounter().GetValue()
			}
		case "ludus_games":
			for _, x := range mf.GetMetric() {
				m.games += x.GetGauge().GetValue()
			}
		}
	}
	if m.lateness == nil {
		m.lateness = &dto.Histogram{}
	}
	return m, nil
}

// histQuantile is the q-quantile of the observations between two snapshots of
// a cumulative histogram, interpolated linearly inside its bucket.
func histQuantile(a, b *dto.Histogram, q float64) float64 {
	total := float64(b.GetSampleCount() - a.GetSampleCount())
	if total == 0 {
		return 0
	}
	target := q * total
	prevBound, prevCount := 0.0, 0.0
	ab := a.GetBucket()
	for i, bk := range b.GetBucket() {
		c := float64(bk.GetCumulativeCount())
		if i < len(ab) {
			c -= float64(ab[i].GetCumulativeCount())
		}
		if c >= target {
			if c == prevCount {
				return bk.GetUpperBound()
			}
			return prevBound + (bk.GetUpperBound()-prevBound)*(target-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = bk.GetUpperBound(), c
	}
	return math.Inf(1) // beyond the last bucket
}
