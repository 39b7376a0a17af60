package batch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/backend/store"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/internal/utf8cut"
	"ludus.dev/ludus/simnode/engine"
)

// WorkerConfig configures a Worker. Etcd and Backend are required.
type WorkerConfig struct {
	// ID names the worker in leases and results (at most 128 bytes); default
	// "w-" + random hex.
	ID string
	// Etcd holds the queues.
	Etcd *clusterstate.Client
	// Backend stores results and serves module builds: the backend's Server
	// in its own process, a RemoteBackend elsewhere (a sim node). Unless
	// NoReaper is set it must be a full Backend (the reaper records runs);
	// when it is not, runs this worker ends are recorded in the backend by
	// the reaper.
	Backend WorkerBackend
	// Engine runs the games; nil creates one (closed when the worker stops).
	Engine *engine.Engine
	// Concurrency is how many games the worker plays at once. Default
	// GOMAXPROCS-1 (at least 1): a sim node keeps a core for its live matches.
	Concurrency int
	// LiveLate reports whether live matches on this node are late; while it
	// does, games pause between chunks of ticks (Runner.Yield). Nil: never.
	LiveLate func() bool
	// LeaseTTL is the worker's etcd lease: a worker that vanishes gives its
	// games back to the queue this long after its last renewal (one cut off
	// from etcd that long abandons them, and takes a new lease once etcd
	// answers). Default 10 s.
	LeaseTTL time.Duration
	// Poll is how often an idle worker looks for runs. Default 1 s.
	Poll time.Duration
	// NoReaper keeps this worker out of the reaper election.
	NoReaper bool
	// MaxAttempts is how many times a game may lose its worker — the worker
	// died or lost its etcd lease, or the reaper ended its overdue lease —
	// before it is recorded as failed instead of being played again. Default
	// DefaultMaxAttempts.
	MaxAttempts int
	// MaxPause is how long in all a game may wait for the node's live
	// matches (LiveLate) before the worker gives it back to the queue, its
	// attempt taken back, for a worker with room; the worker then claims
	// nothing while the live matches are late. Held longer, the game ran
	// past the reaper's item timeout (at least a minute), which ended its
	// claim as a lost attempt: a game on a busy node was recorded as failed
	// after three. Default DefaultMaxPause.
	MaxPause time.Duration
	// Reaper configures the reaper this worker runs when elected.
	Reaper ReaperConfig
	// Logger gets the worker's errors; slog.Default() if nil.
	Logger *slog.Logger
}

// DefaultMaxAttempts is WorkerConfig.MaxAttempts's default: a game that
// lost three workers (ran past the reaper's item timeout, crashed the
// process playing it, or was being played when its worker lost its etcd
// lease) is not played a fourth time.
const DefaultMaxAttempts = 3

// DefaultMaxPause is WorkerConfig.MaxPause's default, well within the
// reaper's shortest item timeout (a minute).
const DefaultMaxPause = 20 * time.Second

// Worker plays batch items. It runs until the context given to StartWorker
// ends: losing its etcd lease (etcd unreachable for longer than LeaseTTL)
// abandons the games it was playing under that lease, and it goes on under
// a new one.
type Worker struct {
	cfg  WorkerConfig
	full Backend // cfg.Backend if it is a full Backend, else nil
	eng  *engine.Engine
	own  bool // eng is ours to close
	log  *slog.Logger
	done chan struct{}

	leaseMu sync.Mutex
	lease   *clusterstate.Lease // the current lease; keepLease replaces it once lost
	renewed chan struct{}       // closed when lease is replaced

	mu     sync.Mutex
	runs   []clusterstate.BatchRun
	runsAt time.Time
	cursor map[string]int   // run -> next game to look at
	specs  map[string]*Spec // run -> decoded spec
	next   int              // round robin over runs
	played int
}

// StartWorker starts a worker: Concurrency goroutines claiming items of
// running runs, and (unless NoReaper) a candidate for the reaper. It returns
// once the worker's lease is granted.
func StartWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	if cfg.Etcd == nil || cfg.Backend == nil {
		return nil, errors.New("batch: WorkerConfig.Etcd and Backend are required")
	}
	full, _ := cfg.Backend.(Backend)
	if full == nil && !cfg.NoReaper {
		return nil, errors.New("batch: a worker whose Backend is only a WorkerBackend (a RemoteBackend) cannot be the reaper: set NoReaper")
	}
	if cfg.ID == "" {
		var b [6]byte
		rand.Read(b[:])
		cfg.ID = "w-" + hex.EncodeToString(b[:])
	}
	if len(cfg.ID) > maxWorkerIDBytes {
		return nil, fmt.Errorf("batch: WorkerConfig.ID is %d bytes, at most %d", len(cfg.ID), maxWorkerIDBytes)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = max(runtime.GOMAXPROCS(0)-1, 1)
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.MaxPause <= 0 {
		cfg.MaxPause = DefaultMaxPause
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	w := &Worker{cfg: cfg, full: full, log: cfg.Logger, eng: cfg.Engine, done: make(chan struct{}),
		renewed: make(chan struct{}), cursor: map[string]int{}, specs: map[string]*Spec{}}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.log = w.log.With("batch_worker", cfg.ID)
	lease, err := cfg.Etcd.GrantLease(ctx, cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	w.lease = lease
	if w.eng == nil {
		if w.eng, err = engine.New(ctx, engine.Config{}); err != nil {
			lease.Close()
			return nil, err
		}
		w.own = true
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.keepLease(ctx)
	}()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.slot(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		// The builds of runs played out go from the engine once unused
		// (a node's does the same for its own games).
		defer wg.Done()
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.eng.EvictIdle(ctx, engine.DefaultModuleIdle)
			}
		}
	}()
	if !cfg.NoReaper {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A lost lease deposes the reaper (runReaper returns); it
			// campaigns again under the next one, like RunReaper.
			for {
				lease, ok := w.liveLease(ctx)
				if !ok {
					return
				}
				runReaper(ctx, cfg.Etcd, full, lease, cfg.ID, cfg.Reaper, w.log)
			}
		}()
	}
	go func() {
		wg.Wait()
		// Revoke the lease: items still leased (none, normally) return at
		// once. A worker whose etcd client is gone cannot; its lease expires.
		w.currentLease().Close()
		if w.own {
			w.eng.Close(context.Background())
		}
		close(w.done)
	}()
	return w, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Done is closed once the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Played counts the games this worker played to the end and acknowledged.
func (w *Worker) Played() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.played
}

// currentLease is the worker's lease now (it may be lost: liveLease waits
// for a live one).
func (w *Worker) currentLease() *clusterstate.Lease {
	w.leaseMu.Lock()
	defer w.leaseMu.Unlock()
	return w.lease
}

// liveLease returns the worker's lease, waiting while it is lost for
// keepLease to grant the next one; false once ctx ends.
func (w *Worker) liveLease(ctx context.Context) (*clusterstate.Lease, bool) {
	for {
		w.leaseMu.Lock()
		lease, renewed := w.lease, w.renewed
		w.leaseMu.Unlock()
		if !lost(lease) {
			return lease, ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-renewed:
		}
	}
}

// keepLease grants a new lease whenever the current one is lost (etcd was
// unreachable for longer than its TTL, or the lease was revoked), trying
// again with backoff while etcd stays unreachable, until ctx ends. Without
// it one etcd outage would stop the worker, and the reaper it carries, for
// good while the process runs on. The games played under the lost lease are
// abandoned (play): their lease keys went with the lease, so their items
// are free again and count a lost attempt, as a dead worker's do.
func (w *Worker) keepLease(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.currentLease().Done():
		}
		// The lease's keep-alive also ends with ctx: that is no loss.
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("batch: etcd lease lost; games in flight are abandoned, granting a new lease")
		for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			next, err := w.cfg.Etcd.GrantLease(ctx, w.cfg.LeaseTTL)
			if err == nil {
				w.leaseMu.Lock()
				w.lease = next
				close(w.renewed)
				w.renewed = make(chan struct{})
				w.leaseMu.Unlock()
				w.log.Info("batch: new etcd lease granted")
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("batch: grant lease, trying again", "in", delay, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}

func lost(lease *clusterstate.Lease) bool {
	select {
	case <-lease.Done():
		return true
	default:
		return false
	}
}

func (w *Worker) slot(ctx context.Context) {
	runner := &Runner{Yield: w.cfg.LiveLate, MaxPause: w.cfg.MaxPause}
	for starved := false; ; {
		if starved && w.cfg.LiveLate != nil {
			// The node is busy with live matches: claimed now, the
			// next game (most likely the one just given back) would only wait too.
			if _, err := backOff(ctx, w.cfg.LiveLate, 0); err != nil {
				return
			}
		}
		lease, ok := w.liveLease(ctx)
		if !ok {
			return
		}
		j, ok := w.claim(ctx, lease)
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-lease.Done(): // liveLease waits for the next
			case <-time.After(w.cfg.Poll):
			}
			continue
		}
		starved = w.play(ctx, runner, j)
	}
}

// job is a claimed item: its run, the claim, and the lease it was claimed
// under. The game is this worker's only while that lease lives.
type job struct {
	run   clusterstate.BatchRun
	claim clusterstate.BatchClaim
	lease *clusterstate.Lease
}

// runList returns the running runs, read from etcd at most every Poll.
func (w *Worker) runList(ctx context.Context) []clusterstate.BatchRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.runsAt) < w.cfg.Poll && w.runs != nil {
		return w.runs
	}
	all, err := w.cfg.Etcd.BatchRuns(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("batch: list runs", "err", err)
		}
		return nil
	}
	w.runs = w.runs[:0]
	for _, r := range all {
		if r.State == clusterstate.BatchRunning {
			w.runs = append(w.runs, r)
		}
	}
	w.runsAt = time.Now()
	return w.runs
}

// forget drops a run from the cached list (it ended, or has no free item).
func (w *Worker) forget(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range w.runs {
		if r.ID == run {
			w.runs = append(w.runs[:i:i], w.runs[i+1:]...)
			return
		}
	}
}

// claim claims a free item of some running run under lease, round robin
// over runs.
func (w *Worker) claim(ctx context.Context, lease *clusterstate.Lease) (job, bool) {
	runs := w.runList(ctx)
	for i := range runs {
		w.mu.Lock()
		r := runs[(w.next+i)%len(runs)]
		from := w.cursor[r.ID]
		w.mu.Unlock()
		if time.Now().After(r.Deadline) {
			continue
		}
		cl, ok, err := w.cfg.Etcd.ClaimBatchItem(ctx, lease, w.cfg.ID, r.Tenant, r.ID, from)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("batch: claim", "run", r.ID, "err", err)
			}
			continue
		}
		if !ok {
			w.forget(r.ID)
			continue
		}
		w.mu.Lock()
		w.cursor[r.ID] = cl.N + 1
		w.next++
		w.mu.Unlock()
		return job{run: r, claim: cl, lease: lease}, true
	}
	return job{}, false
}

// spec returns the run's decoded spec.
func (w *Worker) spec(r clusterstate.BatchRun) (*Spec, error) {
	w.mu.Lock()
	spec := w.specs[r.ID]
	w.mu.Unlock()
	if spec != nil {
		return spec, nil
	}
	spec = new(Spec)
	if err := json.Unmarshal(r.Spec, spec); err != nil {
		return nil, fmt.Errorf("run %s: spec: %w", r.ID, err)
	}
	if len(spec.Maps) == 0 {
		return nil, fmt.Errorf("run %s: spec has no maps", r.ID)
	}
	w.mu.Lock()
	w.specs[r.ID] = spec
	w.mu.Unlock()
	return spec, nil
}

// setup returns the run's spec and compiled module.
func (w *Worker) setup(ctx context.Context, r clusterstate.BatchRun) (*Spec, *engine.Module, error) {
	spec, err := w.spec(r)
	if err != nil {
		return nil, nil, err
	}
	// Looked up in the engine each time, not kept: a node's engine releases
	// builds unused for a while (engine.EvictIdle), and a kept pointer to
	// one would then fail its games.
	if m, ok := w.eng.Module(spec.BuildID); ok {
		return spec, m, nil
	}
	_, wasm, err := w.cfg.Backend.BatchModule(ctx, r.Tenant, "", spec.BuildID)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: module build %s: %w", r.ID, spec.BuildID, err)
	}
	m, err := w.eng.Compile(ctx, wasm)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: module build %s: %w", r.ID, spec.BuildID, err)
	}
	return spec, m, nil
}

// play plays a claimed item, stores its result and acknowledges it.
// It reports whether it gave the game back for waiting too long for the
// node's live matches (Runner.MaxPause).
func (w *Worker) play(ctx context.Context, runner *Runner, j job) (starved bool) {
	r, cl := j.run, j.claim
	if cl.Attempt > w.cfg.MaxAttempts {
		w.giveUp(ctx, j)
		return false
	}
	spec, m, err := w.setup(ctx, r)
	if err != nil {
		w.log.Error("batch: cannot play run", "run", r.ID, "err", err)
		w.release(cl)
		w.forget(r.ID)
		return false
	}
	g := gameOf(spec, cl)
	pctx, cancel := context.WithDeadline(ctx, r.Deadline)
	defer cancel()
	// Stop playing once the game is no longer this worker's to finish: the
	// lease it was claimed under is lost (its lease key went with it, so
	// another worker may have the game), or its lease key is gone — the run
	// ended (canceled, its budget spent, past its deadline: ending deletes
	// its queue) or the reaper ended the game as overdue. Played on, the
	// game's result could not be acknowledged, and the CPU it took would be
	// spent past the run's end.
	gone := w.cfg.Etcd.WatchBatchClaim(pctx, cl)
	go func() {
		select {
		case <-j.lease.Done():
		case <-gone:
		case <-pctx.Done():
		}
		cancel()
	}()
	res, err := runner.Play(pctx, m, spec, g)
	if err != nil {
		if ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
			// The run's deadline passed mid-game.
			w.end(r, clusterstate.BatchDeadline)
			w.charge(ctx, j, res.CPU)
			return false
		}
		if errors.Is(err, ErrStarved) {
			w.log.Info("batch: game given back: the node's live matches kept it waiting", "run", r.ID, "game", cl.N,
				"max_pause", w.cfg.MaxPause)
		}
		// The worker is stopping, the game stopped being its, or it
		// waited too long: it goes back to the queue, its attempt with it.
		w.giveBack(ctx, j, res.CPU)
		return errors.Is(err, ErrStarved)
	}
	res.Worker = w.cfg.ID
	fit(&res)
	if !w.finish(ctx, j, res, true) {
		w.charge(ctx, j, res.CPU)
	}
	return false
}

// gameOf is the game of a claimed item (the item's value, or the spec's
// game of that number if the value does not fit the spec).
func gameOf(spec *Spec, cl clusterstate.BatchClaim) Game {
	var g Game
	if err := json.Unmarshal(cl.Item, &g); err != nil || g.Map < 0 || g.Map >= len(spec.Maps) {
		g = spec.Game(cl.N)
	}
	return g
}

// giveUp records a game that lost its worker more than MaxAttempts times as
// failed, without playing it again: a game that runs past the reaper's item
// timeout, or kills the worker's process, would otherwise go round the queue
// until the run's deadline, holding a worker each time.
func (w *Worker) giveUp(ctx context.Context, j job) {
	r, cl := j.run, j.claim
	spec, err := w.spec(r)
	if err != nil {
		w.log.Error("batch: cannot play run", "run", r.ID, "err", err)
		w.release(cl)
		w.forget(r.ID)
		return
	}
	g := gameOf(spec, cl)
	res := Result{Game: g, MapName: spec.Maps[g.Map].Name, Winner: -1, Worker: w.cfg.ID,
		Error: fmt.Sprintf("not played again: the game lost its worker %d times (it ran past the reaper's item timeout, or the worker stopped or lost its etcd lease while playing it)", cl.Attempt-1)}
	w.log.Warn("batch: game recorded as failed after lost attempts", "run", r.ID, "game", cl.N, "attempts", cl.Attempt-1)
	w.finish(ctx, j, res, false)
}

// finish stores a game's result and then acknowledges its item: only what
// is durable is acknowledged; a game whose result cannot be stored is given
// back, its CPU charged (giveBack). played says whether this worker played
// the game to its end (a game given up on was not). It reports whether the
// game's CPU was counted, or may have been (an acknowledgement whose answer
// did not come back): if not, the caller charges it.
func (w *Worker) finish(ctx context.Context, j job, res Result, played bool) (counted bool) {
	r, cl := j.run, j.claim
	stored, err := w.store(ctx, j.lease, toStore(r.Tenant, r.ID, res))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("batch: store result", "run", r.ID, "game", cl.N, "err", err)
		}
		if c := connect.CodeOf(err); c == connect.CodeNotFound || c == connect.CodeFailedPrecondition {
			w.forget(r.ID) // the run ended (or is gone): its other items are no use
		}
		w.giveBack(ctx, j, res.CPU)
		return true // charged by giveBack
	}
	o := clusterstate.BatchOutcome{Failed: res.Error != "", TimedOut: res.TimedOut, CPU: int64(res.CPU), Ticks: res.Ticks}
	if !played && !stored {
		// A worker that lost the game stored its result after all: that
		// result stands, and it is no failure.
		o.Failed = false
	}
	p, err := w.cfg.Etcd.AckBatchItem(ctx, cl, o)
	if errors.Is(err, clusterstate.ErrBatchLeaseLost) {
		return false // nothing was written
	}
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("batch: ack", "run", r.ID, "game", cl.N, "err", err)
		}
		// It may have been written all the same: charging the CPU too
		// could count it twice.
		return true
	}
	w.mu.Lock()
	w.played++
	w.mu.Unlock()
	switch {
	case p.Done >= r.Games:
		w.end(r, clusterstate.BatchComplete)
	case p.CPU >= r.BudgetCPU:
		w.end(r, clusterstate.BatchBudget)
	}
	return true
}

// stopWrites bounds a stopping worker's last writes to etcd for a game,
// together: etcd may be out of reach, and the process is on its way out.
const stopWrites = time.Second

// giveBack gives a claimed game back to the queue if it is still this
// worker's (release) and charges the CPU it took (charge). A stopping
// worker does both within stopWrites.
func (w *Worker) giveBack(ctx context.Context, j job, cpu time.Duration) {
	if ctx.Err() == nil {
		w.release(j.claim)
		w.charge(ctx, j, cpu)
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), stopWrites)
	defer cancel()
	_ = w.cfg.Etcd.ReleaseBatchItem(sctx, j.claim)
	if err := w.chargeOnce(sctx, j, cpu); err != nil {
		w.log.Warn("batch: CPU of a stopped game not charged", "run", j.run.ID, "game", j.claim.N, "cpu", cpu, "err", err)
	}
}

// charge charges to its run the CPU a game took that was not counted by an
// acknowledgement — a game stopped (its run ended, its claim ended or its
// lease lost, the worker stopping) or whose result could not be stored or
// acknowledged — so that a run's spend, and the tenant's, is all the CPU
// its games took. It tries again while etcd cannot be reached, as long as
// the worker runs (once more when it stops meanwhile); ChargeBatchCPU
// counts a claim once however often it is tried.
func (w *Worker) charge(ctx context.Context, j job, cpu time.Duration) {
	for delay := 250 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		timeout := 5 * time.Second
		if ctx.Err() != nil {
			timeout = stopWrites
		}
		cctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := w.chargeOnce(cctx, j, cpu)
		cancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			w.log.Warn("batch: CPU of a stopped game not charged", "run", j.run.ID, "game", j.claim.N, "cpu", cpu, "err", err)
			return
		}
		w.log.Warn("batch: charge CPU of a stopped game, trying again", "run", j.run.ID, "game", j.claim.N, "in", delay, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
}

// chargeOnce tries a charge once (within ctx). A charge that spends the
// run's budget ends the run; one to an ended run has its record written
// again (here if the worker can, else by the reaper).
func (w *Worker) chargeOnce(ctx context.Context, j job, cpu time.Duration) error {
	if cpu <= 0 {
		return nil
	}
	r, p, err := w.cfg.Etcd.ChargeBatchCPU(ctx, j.claim, int64(cpu))
	switch {
	case errors.Is(err, clusterstate.ErrBatchRunNotFound):
		return nil // its record is gone (a day after it ended): nothing to charge
	case err != nil:
		return err
	case r.State == clusterstate.BatchEnded:
		if w.full != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := recordRun(rctx, w.cfg.Etcd, w.full, r.Tenant, r.ID); err != nil {
				w.log.Warn("batch: record run", "run", r.ID, "err", err)
			}
		}
	case p.CPU >= r.BudgetCPU:
		w.end(r, clusterstate.BatchBudget)
	}
	return nil
}

// release gives a claimed item back to the queue now if etcd is still
// reachable (else the lease's expiry does it), taking its attempt back.
func (w *Worker) release(cl clusterstate.BatchClaim) {
	rctx, cancel := context.WithTimeout(context.Background(), stopWrites)
	defer cancel()
	_ = w.cfg.Etcd.ReleaseBatchItem(rctx, cl)
}

// storeTries bounds the tries of storing one result.
const storeTries = 5

// store stores a result, trying again (backing off from 250 ms) while the
// failure may pass — the backend unreachable or restarting — and the claim
// is still this worker's (lease, the one it was claimed under, lives): the
// game's CPU is spent already. A retry whose first try was stored after all
// stores nothing (the first result of a game wins).
func (w *Worker) store(ctx context.Context, lease *clusterstate.Lease, r store.BatchResult) (bool, error) {
	delay := 250 * time.Millisecond
	for try := 1; ; try++ {
		stored, err := w.cfg.Backend.PutBatchResult(ctx, r)
		if err == nil || try == storeTries || !retryable(err) || ctx.Err() != nil || lost(lease) {
			return stored, err
		}
		w.log.Warn("batch: store result, trying again", "run", r.RunID, "game", r.Game, "try", try, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, err
		case <-lease.Done():
			t.Stop()
			return false, err
		case <-t.C:
		}
		delay *= 2
	}
}

// retryable reports whether a backend error may pass on a later try.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal, connect.CodeDeadlineExceeded,
		connect.CodeAborted, connect.CodeResourceExhausted:
		return true
	}
	return false
}

// Bounds of a game's result as the backend takes it (BatchWorkerService in
// proto/ludus/v1/batch.proto states the same numbers). Every worker fits its
// results in them (fit), in the backend's process or not, so a game's result
// is never refused for its size after the game was played.
const (
	// MaxResultBytes bounds the module's result JSON.
	MaxResultBytes = 1 << 20
	// MaxLogBytes bounds a kept input log.
	MaxLogBytes = 16 << 20
	// MaxErrorBytes bounds a failed game's error text (the trap and the
	// module's output).
	MaxErrorBytes = 80 << 10

	maxWorkerIDBytes = 128
)

// fit fits a result in the bounds: a result or log too large fails the game
// with a message saying so (and is dropped), and the error text is made
// valid UTF-8 and cut to MaxErrorBytes.
func fit(res *Result) {
	var errs []string // what fit did first: a long error is cut at its end
	if len(res.Result) > MaxResultBytes {
		errs = append(errs, fmt.Sprintf("the module's result is %d bytes; a batch result holds at most %d", len(res.Result), MaxResultBytes))
		res.Result, res.Winner = nil, -1
	}
	if len(res.Log) > MaxLogBytes {
		errs = append(errs, fmt.Sprintf("the game's input log is %d bytes; a batch run keeps at most %d per game", len(res.Log), MaxLogBytes))
		res.Log = nil
	}
	if res.Error != "" {
		errs = append(errs, res.Error)
	}
	res.Error = utf8cut.Cut(strings.ToValidUTF8(strings.Join(errs, "\n"), "\uFFFD"), MaxErrorBytes)
}

// end ends a run and records it in the backend (a worker without a full
// Backend leaves the record to the reaper).
func (w *Worker) end(r clusterstate.BatchRun, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.forget(r.ID)
	if err := endRun(ctx, w.cfg.Etcd, w.full, r.Tenant, r.ID, reason); err != nil {
		w.log.Warn("batch: end run", "run", r.ID, "reason", reason, "err", err)
	}
}

// endRun ends a run (if nobody did) and records it in the backend (if
// nobody did: the reaper records what a vanished worker, or one without the
// backend's records (be nil: a sim node's), could not).
func endRun(ctx context.Context, etcd *clusterstate.Client, be Backend, tenant, run, reason string) error {
	if _, err := etcd.EndBatchRun(ctx, tenant, run, reason, time.Now()); err != nil {
		return err
	}
	if be == nil {
		return nil
	}
	return recordRun(ctx, etcd, be, tenant, run)
}

// recordRun writes an ended run's record to the backend, unless it is
// recorded already. Several may record a run at once — the one that ended
// it, workers charging the CPU of its stopped games to it (which changes
// its record: ChargeBatchCPU), the reaper — and the backend keeps the last
// write, so one whose write may have overwritten a newer record finds out
// when its mark fails (the record changed since it read it) and writes
// again: the last write to go through is then of the record as it is.
func recordRun(ctx context.Context, etcd *clusterstate.Client, be Backend, tenant, run string) error {
	again := false
	for range 10 {
		r, p, err := etcd.BatchRunProgress(ctx, tenant, run)
		if err != nil {
			return err
		}
		if r.State != clusterstate.BatchEnded || r.Recorded && !again {
			return nil
		}
		if err := be.PutBatchRun(ctx, runRecord(r, p)); err != nil {
			return err
		}
		marked, err := etcd.MarkBatchRunRecorded(ctx, tenant, run, r.Rev)
		if err != nil || marked {
			return err
		}
		again = true
	}
	return fmt.Errorf("batch run %s: its record changed under each of 10 writes to the backend", run)
}
