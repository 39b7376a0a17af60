package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/batch"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/gateway"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
)

func init() {
	var games, workers, live int
	var ttl time.Duration
	var kill bool
	registerBench("batch", bench{
		summary: "a batch run of 5-minute arena bot games played by a sim node's batch worker (the backend reached over HTTP/2 with the node's credential) over embedded etcd and a SQLite backend, beside live matches on that node: speed-up vs real time, games per CPU-second, games lost after a worker is killed, lateness of the live matches",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&games, "games", 100, "games in the run (the goal is stated for 1000)")
			fs.IntVar(&workers, "workers", max(runtime.GOMAXPROCS(0)-1, 1), "games the sim node's batch worker plays at once (its --batch-workers; default cores-1, leaving the live matches a core)")
			fs.IntVar(&live, "live", 3, "live 8-bot arena matches on the sim node, each watched by a spectator")
			fs.DurationVar(&ttl, "lease-ttl", 2*time.Second, "worker lease TTL (a killed worker's games return after it)")
			fs.BoolVar(&kill, "kill", true, "add a second node's worker and kill it mid-run (context cancelled, etcd client dropped, lease not released)")
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

// batchBenchBaseline is how long the live matches are measured alone before
// the run starts.
const batchBenchBaseline = 3 * time.Second

// batchBenchToken is the bench cluster's token; the node holds only its
// credential derived from it.
const batchBenchToken = "bench-batch-cluster-token"

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
	srv, err := backend.New(ctx, backend.Config{Store: st, ClusterToken: batchBenchToken, ValidateModule: eng.Validate, Logger: quiet})
	if err != nil {
		return nil, err
	}
	tenant, err := srv.EnsureTenant(ctx, "bench", "Bench")
	if err != nil {
		return nil, err
	}
	buildID, err := srv.EnsureModule(ctx, tenant, "arena", builtin.Arena)
	if err != nil {
		return nil, err
	}
	if err := srv.SetBatchPolicy(ctx, tenant, 1000*time.Hour, 0); err != nil {
		return nil, err
	}
	// The backend on loopback, HTTP/2 without TLS, as the roles call it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sctx, stopServe := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveOn(sctx, ln, srv.Handler(), gateway.DefaultBodyReadTimeout, quiet)
	}()
	defer func() { stopServe(); <-served }()
	backendURL := "http://" + ln.Addr().String()
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	cred, err := clustercred.Node(batchBenchToken, "bench-node")
	if err != nil {
		return nil, err
	}

	// The sim node: live matches, each watched by a spectator (its views
	// rendered every frame), its batch worker playing beside them.
	reg := prometheus.NewRegistry()
	cores := runtime.GOMAXPROCS(0)
	node, err := simnode.New(simnode.Config{ID: "bench-node", Addr: "http://127.0.0.1:1", Etcd: etcd, Engine: eng, Workers: cores,
		Modules: simnode.NewModuleStore(h2c, backendURL, cred), NodeCredential: cred, Metrics: reg, IdleEnd: -1, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if err := node.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		node.Close(cctx)
		cancel()
	}()
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	var liveWG sync.WaitGroup
	var frames atomic.Int64
	for i := range nlive {
		id := fmt.Sprintf("live-%d", i)
		if _, err := node.StartGame(ctx, clusterstate.GameSpec{TenantID: tenant, GameID: id, BuildID: buildID, Seed: uint64(1000 + i),
			Config: []byte(`{"bots":8,"score_limit":100000,"time_limit_s":86400}`)}); err != nil {
			return nil, fmt.Errorf("live match %d: %w", i, err)
		}
		liveWG.Add(1)
		go func() {
			defer liveWG.Done()
			_ = node.Watch(liveCtx, tenant, id, "", func(simnode.Frame) { frames.Add(1) })
		}()
	}
	lateness := node.LiveLateness(0, 0) // the defaults, as `ludus simnode --batch-workers` uses

	// As `ludus simnode --batch-workers` does: the batch games get Ps of
	// their own, the live matches keep one per core (the victim, standing
	// for another machine's node, gets one too).
	batchPs := nworkers
	if kill {
		batchPs++
	}
	runtime.GOMAXPROCS(cores + batchPs)
	defer runtime.GOMAXPROCS(cores)
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	// The reaper runs with the backend, which plays no games itself.
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		batch.RunReaper(wctx, etcd, srv, "bench-backend", ttl, batch.ReaperConfig{Every: 500 * time.Millisecond}, quiet)
	}()
	nodeWorker, err := batch.StartWorker(wctx, batch.WorkerConfig{ID: "bench-node", Etcd: etcd, Backend: batch.NewRemoteBackend(h2c, backendURL, cred),
		Engine: eng, Concurrency: nworkers, LiveLate: lateness.Late, LeaseTTL: ttl, Poll: 50 * time.Millisecond, NoReaper: true, Logger: quiet})
	if err != nil {
		return nil, err
	}
	var victim *batch.Worker
	var victimCli *clusterstate.Client
	var killVictim context.CancelFunc
	if kill {
		if victimCli, err = dial(); err != nil {
			return nil, err
		}
		vcred, err := clustercred.Node(batchBenchToken, "victim")
		if err != nil {
			return nil, err
		}
		var vctx context.Context
		vctx, killVictim = context.WithCancel(ctx)
		defer killVictim()
		if victim, err = batch.StartWorker(vctx, batch.WorkerConfig{ID: "victim", Etcd: victimCli, Backend: batch.NewRemoteBackend(h2c, backendURL, vcred),
			Engine: eng, Concurrency: 1, LiveLate: lateness.Late, LeaseTTL: ttl, Poll: 50 * time.Millisecond, NoReaper: true, Logger: quiet}); err != nil {
			return nil, err
		}
	}

	// The live matches alone first: the machine's own noise, to read the
	// lateness during the batch against.
	quiet0, err := gatherBench(reg)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(batchBenchBaseline):
	}
	before, err := gatherBench(reg)
	if err != nil {
		return nil, err
	}
	frames0 := frames.Load()
	adm := &batch.Admitter{Etcd: etcd, Backend: srv, Engine: eng}
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
		if kill && !killed && (victim.Played() >= 1 || p.Done >= games/4 || p.Done >= games-2) {
			// Kill the victim while it holds a game if it can be caught so,
			// once it stored one: early, as its node would be another
			// machine, not a second batch thread beside the live matches.
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
	after, err := gatherBench(reg)
	if err != nil {
		return nil, err
	}
	liveFrames := frames.Load() - frames0
	stopLive()
	liveWG.Wait()
	stopWorkers()
	<-nodeWorker.Done()
	<-reaped
	if victim != nil {
		select {
		case <-victim.Done():
		case <-time.After(5 * time.Second):
		}
	}

	seen := map[int]int{}
	var ticks int64
	results := 0
	err = srv.EachBatchResult(ctx, tenant, run.ID, store.BatchResultQuery{Limit: store.MaxBatchResultPage}, func(r store.BatchResult) error {
		seen[r.Game]++
		ticks += r.Ticks
		results++
		return nil
	})
	if err != nil {
		return nil, err
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
	liveTicks := after.lateness.GetSampleCount() - before.lateness.GetSampleCount()
	res := map[string]any{
		"games":                             games,
		"wall_ms":                           wall.Milliseconds(),
		"speedup_vs_realtime":               float64(ticks) / 35 / wall.Seconds(),
		"games_per_cpu_sec":                 float64(final.Final.Done) / cpu,
		"items_lost_after_kill":             lost,
		"live_p99_lateness_ms_during_batch": lateMS(before.lateness, after.lateness, 0.99),

		"run_reason":                         final.Reason,
		"results_doubled":                    doubled,
		"results":                            results,
		"game_seconds":                       float64(ticks) / 35,
		"cpu_s":                              cpu,
		"workers":                            nworkers,
		"node_games_acked":                   nodeWorker.Played(),
		"cores":                              cores,
		"worker_killed":                      killed,
		"victim_games_acked":                 victimPlayed,
		"lease_ttl_s":                        ttl.Seconds(),
		"live_matches":                       nlive,
		"live_ticks_measured":                liveTicks,
		"live_frames_watched":                liveFrames,
		"live_p50_lateness_ms":               lateMS(before.lateness, after.lateness, 0.50),
		"live_late_over_5ms_ticks":           lateOver(before.lateness, after.lateness, 0.005),
		"live_p99_lateness_ms_without_batch": lateMS(quiet0.lateness, before.lateness, 0.99),
		"live_ticks_without_batch":           before.lateness.GetSampleCount() - quiet0.lateness.GetSampleCount(),
		"live_note": "live matches are real 8-bot arena matches on an in-process sim node, each watched by a spectator; lateness is the node's " +
			"ludus_tick_lateness_seconds histogram over the run, interpolated within its buckets (exact at the 5 ms bound); the batch worker " +
			"is the node's (RemoteBackend with its node credential, games paused while a live tick starts more than " +
			lateness.Threshold().String() + " late)",
	}
	if lost != 0 || doubled != 0 || final.Reason != clusterstate.BatchComplete {
		return res, fmt.Errorf("bench batch: run ended %s with %d games lost and %d doubled", final.Reason, lost, doubled)
	}
	return res, nil
}

// lateMS is histQuantile in milliseconds, a quantile beyond the histogram's
// last bucket reported as that bucket's bound (1 s): JSON has no infinity.
func lateMS(a, b *dto.Histogram, q float64) float64 {
	v := histQuantile(a, b, q)
	if math.IsInf(v, 1) {
		bs := b.GetBucket()
		v = bs[len(bs)-1].GetUpperBound()
	}
	return v * 1e3
}

// lateOver counts the observations between two snapshots of the lateness
// histogram above bound (a bucket bound).
func lateOver(a, b *dto.Histogram, bound float64) uint64 {
	count := func(h *dto.Histogram) uint64 {
		for _, bk := range h.GetBucket() {
			if bk.GetUpperBound() == bound {
				return h.GetSampleCount() - bk.GetCumulativeCount()
			}
		}
		return 0
	}
	return count(b) - count(a)
}
