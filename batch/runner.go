package batch

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"time"

	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// Runner plays games headless: no views, no pacing — tick after tick as fast
// as the CPU allows — bounded by the game's tick deadline.
type Runner struct {
	// ChunkTicks is how many ticks are stepped between two looks at Yield
	// and the context. Default 35.
	ChunkTicks int
	// Yield, if set, is called between chunks; while it reports true (live
	// games are late) the runner sleeps, backing off up to 50 ms. Between
	// chunks the runner always calls runtime.Gosched.
	Yield func() bool
	// HashEvery is the interval, in ticks, of the state hashes a kept log
	// records (default: the module's tick rate, one per game second).
	HashEvery int64
	// MaxPause, if positive, bounds the time a game may spend paused for
	// Yield in all: past it Play returns ErrStarved, and the game is best
	// played elsewhere.
	MaxPause time.Duration
}

// ErrStarved is Play's error for a game paused longer than Runner.MaxPause
// (live matches on the node kept it waiting).
var ErrStarved = errors.New("batch: the game waited too long for the node's live matches")

// Play plays game g of spec on a fresh instance of m until it ends or reaches
// spec.GameTicks. A failing module is a Result with Error set; the error
// return is for ctx ending (the game is abandoned) alone.
func (r *Runner) Play(ctx context.Context, m *engine.Module, spec *Spec, g Game) (res Result, _ error) {
	res = Result{Game: g, MapName: spec.Maps[g.Map].Name, Winner: -1}
	cfg, err := spec.Config(g)
	if err != nil {
		res.Error = "config: " + err.Error()
		return res, nil
	}
	// The goroutine keeps its thread while it plays, so the thread's CPU
	// time is the game's (cpu_linux.go).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	defer func() { res.CPU = threadCPU() - cpu0 }()

	inst, err := m.Instantiate(ctx, g.Seed)
	if err != nil {
		res.Error = err.Error()
		return res, nil
	}
	defer inst.Close(context.Background())
	if err := inst.Init(ctx, g.Seed, cfg); err != nil {
		res.Error = withOutput(err, inst)
		return res, nil
	}
	chunk := int64(r.ChunkTicks)
	if chunk <= 0 {
		chunk = 35
	}
	every := r.HashEvery
	if every <= 0 {
		every = int64(m.Meta.TickRate)
	}
	var hashes []inputlog.Hash
	var paused time.Duration
	limit := spec.GameTicks
	ended := false
	for !ended && inst.Tick() < limit {
		end := min(inst.Tick()+chunk, limit)
		for !ended && inst.Tick() < end {
			if ended, err = inst.StepEncoded(ctx, nil); err != nil {
				res.Ticks = inst.Tick()
				res.Error = withOutput(err, inst)
				return res, nil
			}
			if spec.KeepLogs && inst.Tick()%every == 0 {
				h, err := inst.StateHash(ctx)
				if err != nil {
					res.Error = withOutput(err, inst)
					return res, nil
				}
				hashes = append(hashes, inputlog.Hash{Tick: inst.Tick(), Hash: h})
			}
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		runtime.Gosched()
		if r.Yield != nil {
			budget := time.Duration(0) // none
			if r.MaxPause > 0 {
				budget = max(r.MaxPause-paused, time.Nanosecond)
			}
			d, err := backOff(ctx, r.Yield, budget)
			if err != nil {
				return res, err
			}
			paused += d
		}
	}
	res.Ticks, res.Ended, res.TimedOut = inst.Tick(), ended, !ended
	out, err := inst.Result(ctx)
	if err != nil {
		res.Error = withOutput(err, inst)
		return res, nil
	}
	res.Result = out
	var w struct {
		Winner *int `json:"winner"`
	}
	// A result over MaxResultBytes is refused later (fit): not decoded.
	if len(out) <= MaxResultBytes && json.Unmarshal(out, &w) == nil && w.Winner != nil {
		res.Winner = *w.Winner
	}
	if spec.KeepLogs {
		res.Log = inputlog.Encode(nil, &inputlog.Chunk{From: 0, To: res.Ticks, Hashes: hashes, Ended: ended})
	}
	return res, nil
}

// backOff sleeps while late reports true, doubling from 1 ms to 50 ms, and
// returns how long it slept. With a positive budget it sleeps no longer than
// that: ErrStarved once the budget is spent with late still true. A budget
// of zero is none.
func backOff(ctx context.Context, late func() bool, budget time.Duration) (time.Duration, error) {
	d, paused := time.Millisecond, time.Duration(0)
	bounded := budget > 0
	for late() {
		if bounded && paused >= budget {
			return paused, ErrStarved
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return paused, ctx.Err()
		case <-t.C:
		}
		paused += d
		d = min(2*d, 50*time.Millisecond)
	}
	return paused, nil
}

func withOutput(err error, inst *engine.Instance) string {
	if out := inst.Output(); out != "" {
		return err.Error() + "\nmodule output:\n" + out
	}
	return err.Error()
}
