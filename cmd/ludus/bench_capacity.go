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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/ops/fleet"
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
	cli  *clientv3.Client
	runs int
}

func benchCapacityNode(ctx context.Context, progress io.Writer, total, trial time.Duration) (map[string]any, error) {
	dir, err := os.MkdirTemp("", "ludus-bench-capacity")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir, NoFsync: true})
	if err != nil {
		return nil, err
	}
	defer es.Close()
	cli, err := es.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	e, err := newBenchEngine(ctx, engine.InterruptFuel)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	if _, err := e.Compile(ctx, builtin.Arena); err != nil {
		return nil, err
	}
	b := &nodeBench{eng: e, cli: cli}
	const limit = 5 * time.Millisecond
	deadline := time.Now().Add(total)
	best := trialResult{}
	tried := map[int]trialResult{}
	tryN := func(n int) (bool, error) {
		r, ok := tried[n]
		if !ok {
			var err error
			r, err = b.trial(ctx, n, trial)
			if err != nil {
				return false, err
			}
			tried[n] = r
			fmt.Fprintf(progress, "%d matches: p99 lateness %.3f ms, frames dropped %.2f%%, frames delivered %.1f/s per player, ticks %.1f/s per match\n",
				n, r.p99ms, r.droppedPct, r.fps, r.tickHz)
		}
		ok = r.p99ms <= float64(limit)/1e6 && r.droppedPct <= 1
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
	}, nil
}

type trialResult struct {
	matches    int
	p99ms      float64
	droppedPct float64
	fps        float64 // frames delivered per player per second
	tickHz     float64 // ticks per match per second
}

func (b *nodeBench) trial(ctx context.Context, n int, dur time.Duration) (trialResult, error) {
	b.runs++
	reg := prometheus.NewRegistry()
	node, err := simnode.New(simnode.Config{
		ID: fmt.Sprintf("bench-%d", b.runs), Addr: "http://127.0.0.1:1", Etcd: b.cli, Engine: b.eng, Modules: staticArena{},
		Capacity: n + 1, Metrics: reg, ClusterToken: "bench", Workers: capWorkers,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return trialResult{}, err
	}
	if err := node.Start(ctx); err != nil {
		return trialResult{}, err
	}
	defer node.Close(context.Background())
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buildID := engine.BuildID(builtin.Arena)
	var frames atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range n {
		tenant, id := fmt.Sprintf("tenant%d", i), fmt.Sprintf("m%d-%d", b.runs, i)
		if _, err := node.StartGame(ctx, fleet.GameSpec{TenantID: tenant, GameID: id, BuildID: buildID,
			Seed: uint64(i + 1), Config: []byte(arenaBenchConfig)}); err != nil {
			return trialResult{}, fmt.Errorf("start match %d: %w", i, err)
		}
		for p := range arena.MaxPlayers {
			account := fmt.Sprintf("player%d", p)
			if _, err := node.Join(ctx, tenant, id, account, account); err != nil {
				return trialResult{}, fmt.Errorf("join match %d: %w", i, err)
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				_ = node.Watch(tctx, tenant, id, account, func(simnode.Frame) { frames.Add(1) })
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
		}
	}
	time.Sleep(time.Second)
	h0, d0, err := gatherBench(reg)
	if err != nil {
		return trialResult{}, err
	}
	f0 := frames.Load()
	start := time.Now()
	time.Sleep(dur)
	h1, d1, err := gatherBench(reg)
	if err != nil {
		return trialResult{}, err
	}
	f1 := frames.Load()
	el := time.Since(start).Seconds()
	cnt := h1.GetSampleCount() - h0.GetSampleCount()
	due := float64(cnt) / arena.FrameDivisor * arena.MaxPlayers // views due in the window
	return trialResult{
		matches:    n,
		p99ms:      histQuantile(h0, h1, 0.99) * 1000,
		droppedPct: 100 * (d1 - d0) * arena.MaxPlayers / math.Max(due, 1),
		fps:        float64(f1-f0) / el / float64(n*arena.MaxPlayers),
		tickHz:     float64(cnt) / el / float64(n),
	}, nil
}

// gatherBench reads the node's lateness histogram and its dropped-frame count
// (per tick: one dropped render skips every watched view of that tick).
func gatherBench(reg *prometheus.Registry) (*dto.Histogram, float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, 0, err
	}
	var h *dto.Histogram
	var dropped float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ludus_tick_lateness_seconds":
			h = mf.GetMetric()[0].GetHistogram()
		case "ludus_frames_dropped_total":
			for _, m := range mf.GetMetric() {
				dropped += m.GetCounter().GetValue()
			}
		}
	}
	if h == nil {
		h = &dto.Histogram{}
	}
	return h, dropped, nil
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
