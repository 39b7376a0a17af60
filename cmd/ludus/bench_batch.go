package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/batch"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode/engine"
)

func init() {
	var games, workers, live int
	var ttl time.Duration
	var kill bool
	registerBench("batch", bench{
		summary: "a batch run of 5-minute arena bot games on in-process workers over embedded etcd and a SQLite backend: speed-up vs real time, games per CPU-second, games lost after a worker is killed, lateness of live matches alongside",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&games, "games", 100, "games in the run (the goal is stated for 1000)")
			fs.IntVar(&workers, "workers", max(runtime.GOMAXPROCS(0), 1), "workers that survive (one game at a time each)")
			fs.IntVar(&live, "live", 3, "live 8-bot arena matches ticking at 35 Hz in the same process")
			fs.DurationVar(&ttl, "lease-ttl", 2*time.Second, "worker lease TTL (a killed worker's games return after it)")
			fs.BoolVar(&kill, "kill", true, "add a worker and kill it mid-run (context cancelled, etcd client dropped, lease not released)")
		},
		run: func(ctx context.Context, progress io.Writer) (map[string]any, error) {
			if games < 1 || games > 20_000 || workers < 1 || workers > 64 || live < 0 || live > 64 || ttl < time.Second || ttl > time.Minute {
				return nil, errors.New("want 1 <= -games <= 20000, 1 <= -workers <= 64, 0 <= -live <= 64, 1s <= -lease-ttl <= 1m")
			}
			return benchBatch(ctx, progress, games, workers, live, ttl, kill)
		},
	})
}

// batchBenchConfig is a five-minute arena match of 8 bots that nobody ends
// early (score limit out of reach): 10,500 ticks.
const batchBenchConfig = `{"bots":8,"score_limit":1000,"time_limit_s":300}`

func benchBatch(ctx context.Context, progress io.Writer, games, nworkers, nlive int, ttl time.Duration, kill bool) (map[string]any, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := os.MkdirTemp("", "ludus-bench-batch")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		return nil, err
	}
	defer es.Close()
	dial := func() (*clusterstate.Client, error) {
		return clusterstate.Dial(clusterstate.DialConfig{Endpoints: []string{es.Endpoint}})
	}
	etcd, err := dial()
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	eng, err := newBenchEngine(ctx, engine.InterruptFuel)
	if err != nil {
		return nil, err
	}
	defer eng.Close(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(dir, "ludus.db"))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	srv, err := backend.New(ctx, backend.Config{Store: st, ValidateModule: eng.Validate, Logger: quiet})
	if err != nil {
		return nil, err
	}
	tenant, err := srv.EnsureTenant(ctx, "bench", "Bench")
	if err != nil {
		return nil, err
	}
	if _, err := srv.EnsureModule(ctx, tenant, "arena", builtin.Arena); err != nil {
		return nil, err
	}
	if err := srv.SetBatchPolicy(ctx, tenant, 1000*time.Hour, 0); err != nil {
		return nil, err
	}
	m, err := eng.Compile(ctx, builtin.Arena)
	if err != nil {
		return nil, err
	}

	// Live matches alongside: real arena instances stepped at 35 Hz, each
	// tick's lateness recorded; the workers yield while a tick is late.
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	var lateFlag atomic.Bool
	var lateMu sync.Mutex
	var lateness []int64 // ns, only while the batch runs
	var measuring atomic.Bool
	var liveWG sync.WaitGroup
	for i := range nlive {
		inst, err := m.Instantiate(ctx, uint64(1000+i))
		if err != nil {
			return nil, err
		}
		if err := inst.Init(ctx, uint64(1000+i), []byte(`{"bots":8,"score_limit":100000,"time_limit_s":86400}`)); err != nil {
			return nil, err
		}
		liveWG.Add(1)
		go func() {
			defer liveWG.Done()
			defer inst.Close(context.Background())
			const period = time.Second / 35
			next := time.Now()
			for liveCtx.Err() == nil {
				next = next.Add(period)
				time.Sleep(time.Until(next))
				late := time.Since(next)
				lateFlag.Store(late > 4*time.Millisecond)
				if measuring.Load() {
					lateMu.Lock()
					lateness = append(lateness, int64(late))
					lateMu.Unlock()
				}
				if _, err := inst.StepEncoded(liveCtx, nil); err != nil {
					return
				}
				if late > 100*time.Millisecond {
					next = time.Now() // a match skips ticks rather than bursting
				}
			}
		}()
	}

	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var workers []*batch.Worker
	for i := range nworkers {
		w, err := batch.StartWorker(wctx, batch.WorkerConfig{ID: fmt.Sprintf("w%d", i), Etcd: etcd, Backend: srv, Engine: eng, Concurrency: 1,
			LiveLate: lateFlag.Load, LeaseTTL: ttl, Poll: 50 * time.Millisecond, Logger: quiet,
			Reaper: batch.ReaperConfig{Every: 500 * time.Millisecond}})
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	var victim *batch.Worker
	var victimCli *clusterstate.Client
	var killVictim context.CancelFunc
	if kill {
		if victimCli, err = dial(); err != nil {
			return nil, err
		}
		var vctx context.Context
		vctx, killVictim = context.WithCancel(ctx)
		defer killVictim()
		if victim, err = batch.StartWorker(vctx, batch.WorkerConfig{ID: "victim", Etcd: victimCli, Backend: srv, Engine: eng, Concurrency: 1,
			LiveLate: lateFlag.Load, LeaseTTL: ttl, Poll: 50 * time.Millisecond, NoReaper: true, Logger: quiet}); err != nil {
			return nil, err
		}
	}

	adm := &batch.Admitter{Etcd: etcd, Backend: srv, Engine: eng}
	measuring.Store(true)
	start := time.Now()
	run, err := adm.Admit(ctx, tenant, batch.Spec{Module: "arena", Games: games, Maps: []batch.Map{{Name: "arena", Config: json.RawMessage(batchBenchConfig)}},
		Budget: 1000 * time.Hour, Deadline: 30 * time.Minute})
	if err != nil {
		return nil, err
	}
	killed := false
	var final clusterstate.BatchRun
	lastReport := time.Now()
	for {
		r, p, err := etcd.BatchRunProgress(ctx, tenant, run.ID)
		if err != nil {
			return nil, err
		}
		if kill && !killed && (p.Done >= games/4 || p.Done >= games-2) {
			// Kill the victim while it holds a game if it can be caught so.
			ls, _ := etcd.BatchLeases(ctx, tenant, run.ID)
			holds := false
			for _, l := range ls {
				holds = holds || l.Worker == "victim"
			}
			if holds || p.Done >= games/2 {
				victimCli.Close()
				killVictim()
				killed = true
				fmt.Fprintf(progress, "killed worker victim after %d games (holding a game: %v)\n", p.Done, holds)
			}
		}
		if time.Since(lastReport) > 2*time.Second {
			fmt.Fprintf(progress, "%d/%d games, %.0f× real time\n", p.Done, games, float64(p.Ticks)/35/time.Since(start).Seconds())
			lastReport = time.Now()
		}
		if r.State == clusterstate.BatchEnded {
			final = r
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	wall := time.Since(start)
	measuring.Store(false)
	stopLive()
	liveWG.Wait()
	stopWorkers()
	for _, w := range workers {
		<-w.Done()
	}
	if victim != nil {
		select {
		case <-victim.Done():
		case <-time.After(5 * time.Second):
		}
	}

	results, err := srv.BatchResults(ctx, tenant, run.ID, time.Time{}, false)
	if err != nil {
		return nil, err
	}
	seen := map[int]int{}
	var ticks int64
	for _, r := range results {
		seen[r.Game]++
		ticks += r.Ticks
	}
	lost, doubled := 0, 0
	for n := range games {
		switch seen[n] {
		case 0:
			lost++
		case 1:
		default:
			doubled++
		}
	}
	cpu := float64(final.Final.CPU) / 1e9
	victimPlayed := 0
	if victim != nil {
		victimPlayed = victim.Played()
	}
	res := map[string]any{
		"games":                             games,
		"wall_ms":                           wall.Milliseconds(),
		"speedup_vs_realtime":               float64(ticks) / 35 / wall.Seconds(),
		"games_per_cpu_sec":                 float64(final.Final.Done) / cpu,
		"items_lost_after_kill":             lost,
		"live_p99_lateness_ms_during_batch": float64(pct(lateness, 99)) / 1e6,

		"run_reason":           final.Reason,
		"results_doubled":      doubled,
		"results":              len(results),
		"game_seconds":         float64(ticks) / 35,
		"cpu_s":                cpu,
		"workers":              nworkers,
		"cores":                runtime.GOMAXPROCS(0),
		"worker_killed":        killed,
		"victim_games_acked":   victimPlayed,
		"lease_ttl_s":          ttl.Seconds(),
		"live_matches":         nlive,
		"live_ticks_measured":  len(lateness),
		"live_p50_lateness_ms": float64(pct(lateness, 50)) / 1e6,
		"live_note":            "live matches are simulated: real 8-bot arena instances stepped by a 35 Hz ticker in the same process, not matches on a sim node",
	}
	if lost != 0 || doubled != 0 || final.Reason != clusterstate.BatchComplete {
		return res, fmt.Errorf("bench batch: run ended %s with %d games lost and %d doubled", final.Reason, lost, doubled)
	}
	return res, nil
}
