package main

import (
	"errors"
	"flag"
	"slices"
	"testing"
	"time"
)

// threshold passes every count up to t.
func threshold(t int, probed *[]int) func(int) (bool, error) {
	return func(n int) (bool, error) {
		*probed = append(*probed, n)
		return n <= t, nil
	}
}

func always(int) bool { return true }

func adjacent(lo, hi int) bool { return hi-lo <= 1 }

func TestSearchMaxFindsThreshold(t *testing.T) {
	for _, c := range []struct {
		name                string
		start, limit, thres int
		close               func(lo, hi int) bool
		wantBest, wantFail  int
		wantCapped          bool
	}{
		{"exact, above start", 32, 1024, 237, adjacent, 237, 238, false},
		{"exact, below start", 32, 1024, 5, adjacent, 5, 6, false},
		{"nothing passes", 32, 1024, 0, adjacent, 0, 1, false},
		{"exactly a power of two", 32, 1024, 256, adjacent, 256, 257, false},
		{"capped", 32, 300, 5000, adjacent, 300, 0, true},
		{"limit below start", 32, 10, 5000, adjacent, 10, 0, true},
		{"start 0 is 1", 0, 100, 3, adjacent, 3, 4, false},
	} {
		var probed []int
		out, err := searchMax(c.start, c.limit, c.close, always, threshold(c.thres, &probed))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if out.best != c.wantBest || out.firstFail != c.wantFail || out.capped != c.wantCapped {
			t.Errorf("%s: best %d, first fail %d, capped %v; want %d, %d, %v (probes %v)",
				c.name, out.best, out.firstFail, out.capped, c.wantBest, c.wantFail, c.wantCapped, probed)
		}
		for i, n := range probed {
			if n > c.limit || n < 1 {
				t.Errorf("%s: probed %d, outside [1, %d]", c.name, n, c.limit)
			}
			if slices.Contains(probed[:i], n) {
				t.Errorf("%s: probed %d twice (%v)", c.name, n, probed)
			}
		}
		if !slices.Equal(probed, out.probes) {
			t.Errorf("%s: reported probes %v, made %v", c.name, out.probes, probed)
		}
	}
}

func TestSearchMaxDoublesThenBisects(t *testing.T) {
	var probed []int
	out, err := searchMax(32, 1024, adjacent, always, threshold(300, &probed))
	if err != nil {
		t.Fatal(err)
	}
	// 32, 64, 128, 256 pass, 512 fails; then bisection of (256, 512).
	if want := []int{32, 64, 128, 256, 512, 384, 320, 288, 304, 296, 300, 302, 301}; !slices.Equal(probed, want) {
		t.Errorf("probes %v, want %v", probed, want)
	}
	if out.best != 300 {
		t.Errorf("best %d, want 300", out.best)
	}
}

func TestSearchMaxResolution(t *testing.T) {
	var probed []int
	out, err := searchMax(32, 1024, within5pct, always, threshold(300, &probed))
	if err != nil {
		t.Fatal(err)
	}
	if out.best > 300 || out.firstFail <= 300 {
		t.Fatalf("best %d, first fail %d: the threshold 300 is not between them", out.best, out.firstFail)
	}
	if out.firstFail-out.best > max(1, out.best/20) {
		t.Errorf("stopped at (%d, %d): wider than 5%%", out.best, out.firstFail)
	}
	if len(probed) >= 13 {
		t.Errorf("%d probes: a 5%% resolution should need fewer than the exact search's 13 (%v)", len(probed), probed)
	}
}

func TestSearchMaxBudget(t *testing.T) {
	var probed []int
	budget := 3
	more := func(int) bool { budget--; return budget >= 0 }
	out, err := searchMax(32, 1024, adjacent, more, threshold(300, &probed))
	if err != nil {
		t.Fatal(err)
	}
	if len(probed) != 3 || !out.outOfTime {
		t.Fatalf("probes %v, out of time %v: want 3 probes and out of time", probed, out.outOfTime)
	}
	if out.best != 128 || out.capped {
		t.Errorf("best %d capped %v, want 128 (the largest count probed, all passed)", out.best, out.capped)
	}
	// The budget sees the count it is asked about.
	var asked []int
	_, _ = searchMax(8, 64, adjacent, func(n int) bool { asked = append(asked, n); return n < 64 }, threshold(1000, &probed))
	if !slices.Equal(asked, []int{8, 16, 32, 64}) {
		t.Errorf("budget asked about %v, want [8 16 32 64]", asked)
	}
}

func TestSearchMaxError(t *testing.T) {
	boom := errors.New("boom")
	out, err := searchMax(32, 1024, adjacent, always, func(n int) (bool, error) {
		if n == 128 {
			return false, boom
		}
		return true, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if out.best != 64 {
		t.Errorf("best %d, want 64", out.best)
	}
}

func TestSnapshotPass(t *testing.T) {
	for _, c := range []struct {
		r    trialResult
		want bool
	}{
		{trialResult{p99ms: 4.9, deliveredPct: 99.5}, true},
		{trialResult{p99ms: 5, deliveredPct: 99}, true},
		{trialResult{p99ms: 5.01, deliveredPct: 100}, false},
		{trialResult{p99ms: 1, deliveredPct: 98.9}, false},
		{trialResult{p99ms: 1, deliveredPct: 100, failure: "1 of 8 matches stopped"}, false},
	} {
		if got := snapshotPass(c.r); got != c.want {
			t.Errorf("%+v: %v, want %v", c.r, got, c.want)
		}
	}
}

// The snapshot flags are added to the capacity bench registered in
// bench_engine.go by an init that must run after that file's.
func TestCapacityBenchHasSnapshotFlags(t *testing.T) {
	b, ok := benches["capacity"]
	if !ok {
		t.Fatal("no capacity bench")
	}
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	b.flags(fs)
	for _, name := range []string{"duration", "trial", "raw", "workers", "mode", "snapshot-max", "snapshot-start",
		"snapshot-duration", "snapshot-trial", "snapshot-encode", "snapshot-retries"} {
		if fs.Lookup(name) == nil {
			t.Errorf("capacity bench has no -%s flag", name)
		}
	}
}

func TestStatBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  1000 20 300 5000 40 0 60 7 900 9\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
	if got, want := statBusy(stat), (1000+20+300+60+7)*(time.Second/100); got != want {
		t.Errorf("busy %v, want %v", got, want)
	}
	if got := statBusy("intr 1 2 3"); got != 0 {
		t.Errorf("busy %v from a file without a cpu line", got)
	}
}
