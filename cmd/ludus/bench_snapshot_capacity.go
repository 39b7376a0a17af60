package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Snapshot mode of `ludus bench capacity`: the most 8-player arena matches one
// node holds at p99 tick lateness <= 5 ms when every player streams its
// snapshot every tick (bench_capacity.go has the trial). bench_engine.go
// registers the capacity bench wrapped by withSnapshotMode, which adds the
// snapshot flags and the snapshot search (TestCapacityBenchHasSnapshotFlags).

// Flags of the snapshot search.
var (
	capMode       = "both"
	capSnapStart  = 32
	capSnapMax    = 1024
	capSnapTotal  = 240 * time.Second
	capSnapTrial  = 4 * time.Second
	capSnapEncode = true
	capSnapRetry  = 1
	capFlags      *flag.FlagSet
)

// withSnapshotMode adds snapshot mode (flags, search, figures) to the pixel
// capacity bench b; bench_engine.go registers the result as "capacity".
func withSnapshotMode(b bench) bench {
	b.summary = "concurrent 8-player arena matches on one node at p99 tick lateness <= 5 ms: pixels (views at 17.5 fps drawn by the module's renderer) and snapshots (every tick, encoded as the gateway does)"
	pixelFlags, pixelRun := b.flags, b.run
	b.flags = func(fs *flag.FlagSet) {
		pixelFlags(fs)
		capFlags = fs
		fs.StringVar(&capMode, "mode", capMode, "which searches to run: pixels, snapshots or both")
		fs.IntVar(&capSnapStart, "snapshot-start", capSnapStart, "matches of the first snapshot trial (doubled until a trial fails)")
		fs.IntVar(&capSnapMax, "snapshot-max", capSnapMax, "most matches a snapshot trial runs (the search reports snapshot_matches_capped when this holds)")
		fs.DurationVar(&capSnapTotal, "snapshot-duration", capSnapTotal, "bound on the whole snapshot search")
		fs.DurationVar(&capSnapTrial, "snapshot-trial", capSnapTrial, "measured length of one snapshot trial")
		fs.BoolVar(&capSnapEncode, "snapshot-encode", capSnapEncode, "encode every snapshot with the gateway's per-stream codec (delta + deflate)")
		fs.IntVar(&capSnapRetry, "snapshot-retries", capSnapRetry, "times a failing snapshot trial is run again before its count counts as failed (other processes on a shared machine cause passing spikes)")
	}
	b.run = func(ctx context.Context, progress io.Writer) (map[string]any, error) {
		if capMode != "pixels" && capMode != "snapshots" && capMode != "both" {
			return nil, fmt.Errorf("-mode %q: want pixels, snapshots or both", capMode)
		}
		res := map[string]any{}
		if l, ok := loadAvg1(); ok {
			res["load_avg_1m_at_start"] = l
		}
		raw := capFlags != nil && capFlags.Lookup("raw") != nil && capFlags.Lookup("raw").Value.String() == "true"
		if capMode != "snapshots" || raw {
			if raw {
				fmt.Fprintln(progress, "bare engine instances (-raw): pixel views only")
			} else {
				fmt.Fprintln(progress, "pixel mode: views at 17.5 fps for every player, drawn by the module's renderer...")
			}
			r, err := pixelRun(ctx, progress)
			if err != nil {
				return nil, err
			}
			for k, v := range r {
				res[k] = v
			}
			if raw {
				return res, nil
			}
		}
		if capMode != "pixels" {
			fmt.Fprintln(progress, "snapshot mode: every player's snapshot every tick, encoded per stream...")
			r, err := benchCapacitySnapshots(ctx, progress)
			if err != nil {
				return nil, fmt.Errorf("snapshot mode: %w", err)
			}
			for k, v := range r {
				res[k] = v
			}
		}
		return res, nil
	}
	return b
}

// searchOutcome is what searchMax found.
type searchOutcome struct {
	// best is the largest count that passed (0: none did); firstFail the
	// smallest that failed (0: none did).
	best, firstFail int
	// capped: max passed, so the real capacity may be higher.
	capped bool
	// outOfTime: the budget ended the search before it was within its
	// resolution.
	outOfTime bool
	probes    []int
}

// searchMax looks for the largest n in [1, limit] for which probe passes,
// assuming that passing is monotone (if n passes, every smaller count does).
// It probes start, then doubles while probes pass (the last step is limit
// itself), then bisects between the largest pass and the smallest failure
// until closeEnough(pass, fail) or they are adjacent. Before each probe it
// asks more(n) whether the budget allows probing n; if not, the search ends
// with what it has. No count is probed twice.
func searchMax(start, limit int, closeEnough func(lo, hi int) bool, more func(n int) bool, probe func(n int) (bool, error)) (searchOutcome, error) {
	var out searchOutcome
	if limit < 1 {
		return out, nil
	}
	lo, hi := 0, 0 // largest pass, smallest failure (0: none yet)
	// try probes n; ran is false when the budget did not allow it.
	try := func(n int) (ok, ran bool, err error) {
		if !more(n) {
			out.outOfTime = true
			return false, false, nil
		}
		out.probes = append(out.probes, n)
		ok, err = probe(n)
		return ok, true, err
	}
	for n := min(max(start, 1), limit); ; n = min(2*n, limit) {
		ok, ran, err := try(n)
		if err != nil || !ran {
			out.best = lo
			return out, err
		}
		if !ok {
			hi = n
			break
		}
		lo = n
		if n == limit {
			out.best, out.capped = lo, true
			return out, nil
		}
	}
	for hi-lo > 1 && !(lo > 0 && closeEnough(lo, hi)) {
		mid := lo + (hi-lo)/2
		ok, ran, err := try(mid)
		if err != nil {
			out.best, out.firstFail = lo, hi
			return out, err
		}
		if !ran {
			break
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	out.best, out.firstFail = lo, hi
	return out, nil
}

// within5pct: a search may stop once the first failure is at most 5% (and
// at least 1) above the largest pass.
func within5pct(lo, hi int) bool { return hi-lo <= max(1, lo/20) }

// snapshotPass is the pass rule of a snapshot trial: every match ran, p99
// lateness <= 5 ms and at least 99% of the snapshots due delivered.
func snapshotPass(r trialResult) bool { return r.failure == "" && r.p99ms <= 5 && r.deliveredPct >= 99 }

// benchCapacitySnapshots runs the snapshot search on a fresh etcd and engine.
func benchCapacitySnapshots(ctx context.Context, progress io.Writer) (map[string]any, error) {
	b, release, err := newNodeBench(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	began := time.Now()
	deadline := began.Add(capSnapTotal)
	results := map[int]trialResult{}
	var lastN int
	var lastWall time.Duration
	// A probe's wall time grows with its count (setup, teardown): estimate it
	// from the last probe, scaled, plus the trial itself.
	more := func(n int) bool {
		est := capSnapTrial + 3*time.Second
		if lastN > 0 {
			est = max(est, time.Duration(float64(lastWall)*float64(n)/float64(lastN)))
		}
		return ctx.Err() == nil && time.Now().Add(est).Before(deadline)
	}
	var log []string
	trial := func(n int) (trialResult, bool, error) {
		fmt.Fprintf(progress, "%d matches (snapshots): starting...\n", n)
		t0 := time.Now()
		r, err := b.trial(ctx, n, capSnapTrial, viewSnapshots)
		if err != nil {
			return r, false, err
		}
		lastN, lastWall = n, time.Since(t0)
		ok := snapshotPass(r)
		verdict := "fail"
		if ok {
			verdict = "pass"
		}
		if r.failure != "" {
			fmt.Fprintf(progress, "%d matches (snapshots): failed: %s\n", n, r.failure)
			log = append(log, fmt.Sprintf("%d:matches-lost/fail", n))
			return r, false, nil
		}
		fmt.Fprintf(progress, "%d matches (snapshots): p99 lateness %.3f ms, snapshots delivered %.2f%% (%.1f/s per player), %.0f B/s per player encoded, CPU %.2f ms per match-second (ticks %.2f), setup %.1f s, other processes %.2f cores: %s\n",
			n, r.p99ms, r.deliveredPct, r.fps, r.bytesPerSec, r.cpuMs, r.tickMs, r.setup.Seconds(), r.others, verdict)
		log = append(log, fmt.Sprintf("%d:%.2fms/%.1f%%/%.2fcores/%s", n, r.p99ms, r.deliveredPct, r.others, verdict))
		return r, ok, nil
	}
	probe := func(n int) (bool, error) {
		for attempt := 0; ; attempt++ {
			r, ok, err := trial(n)
			if err != nil {
				return false, err
			}
			if ok || attempt >= capSnapRetry || !more(n) {
				results[n] = r
				return ok, nil
			}
		}
	}
	out, err := searchMax(capSnapStart, capSnapMax, within5pct, more, probe)
	if err != nil {
		return nil, err
	}
	best := results[out.best]
	res := map[string]any{
		"snapshot_matches":               out.best,
		"snapshot_players":               out.best * 8,
		"snapshot_p99_lateness_ms":       round3(best.p99ms),
		"snapshot_cpu_ms_per_match_sec":  round3(best.cpuMs),
		"snapshot_tick_ms_per_match_sec": round3(best.tickMs),
		"snapshot_delivered_pct":         round3(best.deliveredPct),
		"snapshot_other_cores_busy":      round3(best.others),
		"snapshots_per_s_player":         round3(best.fps),
		"snapshot_encoded":               capSnapEncode,
		"snapshot_matches_capped":        out.capped,
		"snapshot_max":                   capSnapMax,
		"snapshot_search_out_of_time":    out.outOfTime,
		"snapshot_search_seconds":        round3(time.Since(began).Seconds()),
		"snapshot_trials":                strings.Join(log, ","),
		"snapshot_trial_seconds":         capSnapTrial.Seconds(),
		"snapshot_trial_retries":         capSnapRetry,
	}
	if capSnapEncode {
		res["snapshot_consumer"] = "per player: simnode.Node.WatchMode(snapshots) read by a framecodec.Stream (delta + deflate, keyframes every 2 s), as the gateway encodes a browser stream; no protobuf, no network"
		res["snapshot_encoded_bytes_per_s_player"] = round(best.bytesPerSec)
	} else {
		res["snapshot_consumer"] = "per player: simnode.Node.WatchMode(snapshots), each snapshot counted, not encoded"
	}
	if out.firstFail > 0 {
		f := results[out.firstFail]
		res["snapshot_first_failing_matches"] = out.firstFail
		res["snapshot_first_failing_p99_lateness_ms"] = round3(f.p99ms)
		res["snapshot_first_failing_delivered_pct"] = round3(f.deliveredPct)
		if f.failure != "" {
			res["snapshot_first_failing_reason"] = f.failure
		}
	}
	return res, nil
}

// loadAvg1 is the machine's 1-minute load average (Linux /proc/loadavg): how
// busy other processes kept the cores when a bench started.
func loadAvg1() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}
