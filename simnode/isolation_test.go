package simnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/internal/wasmtest"
	"ludus.dev/ludus/simnode/engine"
)

// mapModules serves modules by build id.
type mapModules map[string][]byte

func (m mapModules) FetchModule(_ context.Context, _, buildID string) ([]byte, error) {
	if b, ok := m[buildID]; ok {
		return b, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no module %s", buildID))
}

// TestIsolation: hostile modules beside arena matches on one node. Each
// hostile match fails on its own with a clear message (cause, tick, build),
// and the arena matches keep their tick rate throughout.
func TestIsolation(t *testing.T) {
	cases := []struct {
		name, want string
		wasm       []byte
		watch      bool // a spectator, so ludus_view is called
		group      int  // cases of a group run at once
	}{
		{"runaway step", "exceeded its CPU deadline at tick 0", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Spin, wasmtest.I32Const(0))), false, 0},
		{"runaway step 2", "exceeded its CPU deadline at tick 0", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.I32Const(0), []byte{0x1a}, wasmtest.Spin, wasmtest.I32Const(0))), false, 0},
		{"runaway view", "exceeded its CPU deadline at tick", wasmtest.Hostile("ludus_view", wasmtest.Cat(wasmtest.Spin, wasmtest.I64Const(0))), true, 1},
		{"trap", "crashed (wasm error: unreachable", wasmtest.Hostile("ludus_step", []byte{0x00}), false, 1},
		// Slow to stop (the engine notices the deadline only at its next fuel
		// refill, after growing memory or the stack): one at a time.
		{"memory bomb", "crashed (wasm error: unreachable", wasmtest.Hostile("ludus_step", wasmtest.Cat(wasmtest.Bomb, []byte{0x00}, wasmtest.I32Const(0))), false, 2},
		{"deep recursion", "at tick 0", wasmtest.Hostile("ludus_step", wasmtest.Cat([]byte{0x10, 0x08}, wasmtest.I32Const(0)), wasmtest.DeepFunc), false, 3},
	}
	mods := mapModules{arenaID: builtin.Arena}
	for _, c := range cases {
		mods[engine.BuildID(c.wasm)] = c.wasm
	}
	n, err := New(Config{ID: "n-isolation", Etcd: state, Engine: testEng, Modules: mods, LeaseTTL: 3 * time.Second,
		FlushInterval: 100 * time.Millisecond, CallDeadline: 50 * time.Millisecond, MemoryLimitPages: 256, Workers: 2,
		ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	suffix := fmt.Sprint(time.Now().UnixNano())

	var arenas []*game
	for i := range 2 {
		g, err := n.StartGame(ctx, clusterstate.GameSpec{TenantID: "good", GameID: fmt.Sprintf("arena%d-%s", i, suffix), BuildID: arenaID, Seed: uint64(i + 1), Config: []byte(`{"bots":4}`)})
		if err != nil {
			t.Fatal(err)
		}
		arenas = append(arenas, g)
	}
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	ticks0 := make([]int64, len(arenas))
	for i, g := range arenas {
		ticks0[i] = g.status.load().v.Tick
	}

	// The two runaways start together and compete for the node's two workers:
	// the scheduler lets one tenant hold only one while another has games.
	var wg sync.WaitGroup
	for i, c := range cases {
		g, err := n.StartGame(ctx, clusterstate.GameSpec{TenantID: "evil", GameID: fmt.Sprintf("h%d-%s", i, suffix), BuildID: engine.BuildID(c.wasm), Seed: 1})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.watch {
			g.specView.pixelViewers.Add(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-g.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s: still running after 10 s", c.name)
				return
			}
			st := g.status.load().v
			if st.State != clusterstate.StateFailed || !strings.HasPrefix(st.Message, "match failed: ") || !strings.Contains(st.Message, c.want) ||
				!strings.Contains(st.Message, "(build "+g.spec.BuildID[:12]) {
				t.Errorf("%s: status %s %q; want failed with %q", c.name, st.State, st.Message, c.want)
			}
		}()
		if i == len(cases)-1 || cases[i+1].group != c.group {
			wg.Wait()
		}
	}
	wg.Wait()
	time.Sleep(time.Second)
	elapsed := time.Since(t0)
	want := elapsed.Seconds() * 35
	for i, g := range arenas {
		st := g.status.load().v
		got := st.Tick - ticks0[i]
		t.Logf("arena %d: %d ticks in %v (%.0f expected; %d ticks held back waiting for the log)", i, got, elapsed.Round(time.Millisecond), want, g.stalls.Load())
		if st.State != clusterstate.StateRunning {
			t.Errorf("arena %d: %s %q", i, st.State, st.Message)
		}
		// Status ticks are published at each flush (100 ms = 3.5 ticks). The
		// bound allows for a loaded machine (other test binaries, -race); a
		// guest that held the node's workers would stop the arenas outright.
		if float64(got) < 0.5*want {
			t.Errorf("arena %d ticked %d times in %v; want about %.0f", i, got, elapsed, want)
		}
	}
	// Lateness depends on the machine (other test binaries, -race), so it is
	// logged, not asserted; the benches measure it.
	h := latenessHistogram(t, n)
	t.Logf("lateness: %d ticks; %d started more than 5 ms late, %d more than 25 ms, %d more than 100 ms", h.GetSampleCount(),
		h.GetSampleCount()-bucketCount(h, 0.005), h.GetSampleCount()-bucketCount(h, 0.025), h.GetSampleCount()-bucketCount(h, 0.1))

	// GET /metrics serves the node's collectors.
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, s := range []string{"ludus_tick_lateness_seconds_bucket", `ludus_games_failed_total{cause="deadline",node="n-isolation"}`,
		`ludus_games_failed_total{cause="trap",node="n-isolation"}`, "ludus_tick_seconds_total", "ludus_instances_acquired_total"} {
		if !strings.Contains(body, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

func latenessHistogram(t *testing.T, n *Node) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := n.metrics.lateness.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

func bucketCount(h *dto.Histogram, le float64) uint64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() >= le {
			return b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount()
}
