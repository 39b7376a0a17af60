package simnode

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/sdk/abi"
)

// sentReport is one report a node made.
type sentReport struct {
	node    string
	match   string
	seq     int64
	final   bool
	players []*ludusv1.PlayerResult
	err     error // what the reporter answered
}

// reportLog records the reports of every node of a test, in order.
type reportLog struct {
	mu      sync.Mutex
	reports []sentReport
}

// of returns the reports of match, in order. (Nodes of a test may report on
// games other tests left in etcd: a node that archives a game delivers its
// result.)
func (l *reportLog) of(match string) []sentReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sentReport
	for _, r := range l.reports {
		if r.match == match {
			out = append(out, r)
		}
	}
	return out
}

// wait returns the reports of match once ok holds for them (at most 15 s).
func (l *reportLog) wait(t *testing.T, what, match string, ok func([]sentReport) bool) []sentReport {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rs := l.of(match)
		if ok(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never; reports so far: %s", what, describeReports(rs))
		}
	}
}

func describeReports(rs []sentReport) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("\n  %s seq %d final %v err %v players %v", r.node, r.seq, r.final, r.err, r.players)
	}
	return s
}

// nodeReporter is one node's ResultReporter: it records each report in log,
// then answers with send (nil: accepted without sending anywhere).
type nodeReporter struct {
	log  *reportLog
	node string
	send ResultReporter
}

func (r nodeReporter) Report(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error {
	var err error
	if r.send != nil {
		err = r.send.Report(ctx, credential, matchID, seq, final, players)
	}
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.reports = append(r.log.reports, sentReport{node: r.node, match: matchID, seq: seq, final: final, players: players, err: err})
	return err
}

// tickTo advances the node's clock one tick period at a time until g has
// stepped to tick or ended, nudging it on while it waits for its log.
func (cn clockNode) tickTo(t *testing.T, g *game, tick int64) {
	t.Helper()
	period := time.Second / time.Duration(g.spec.TickRate)
	for g.stepped.Load() < tick {
		before := g.stepped.Load()
		cn.clk.Advance(period)
		for deadline := time.Now().Add(20 * time.Millisecond); g.stepped.Load() == before && time.Now().Before(deadline); {
			select {
			case <-g.done:
				return
			default:
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// awaitReports is log.wait for an interim report: the node's clock goes on
// (5 ms at a time), so that the log is flushed through the report's tick,
// which the report waits for.
func (cn clockNode) awaitReports(t *testing.T, log *reportLog, what, match string, ok func([]sentReport) bool) []sentReport {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if rs := log.of(match); ok(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never; reports so far: %s", what, describeReports(log.of(match)))
		}
		cn.clk.Advance(5 * time.Millisecond)
	}
}

// joinTickOf returns the tick account's join was applied at, from the log.
func joinTickOf(t *testing.T, tenant, game, account string) int64 {
	t.Helper()
	_, chunks, err := ReadLog(context.Background(), state, tenant, game)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chunks {
		for _, e := range c.Entries {
			if e.Event.Kind == abi.EventJoin && e.Account == account {
				return e.Tick
			}
		}
	}
	t.Fatalf("no join of %s in the log of %s", account, game)
	return 0
}

// checkCumulative checks that each report carries account's totals since it
// joined at joinTick: its duration is that of the whole time played so far
// (not of the interval since the last report), and its stats never go down.
func checkCumulative(t *testing.T, rs []sentReport, account string, joinTick int64, tickRate int64) {
	t.Helper()
	var prev *ludusv1.PlayerResult
	for _, r := range rs {
		if len(r.players) != 1 || r.players[0].AccountId != account {
			t.Fatalf("report seq %d from %s: players %v, want %s alone", r.seq, r.node, r.players, account)
		}
		p := r.players[0]
		if want := (r.seq - joinTick) * 1000 / tickRate; p.DurationMs != want {
			t.Errorf("report seq %d from %s: duration %d ms, want %d (cumulative since the join at tick %d)", r.seq, r.node, p.DurationMs, want, joinTick)
		}
		if prev != nil {
			for k, v := range prev.Stats {
				if p.Stats[k] < v {
					t.Errorf("report seq %d: stat %s went down from %d to %d", r.seq, k, v, p.Stats[k])
				}
			}
		}
		prev = p
	}
}

// startTimedArena starts an arena of one bot and ada that ends after limit
// seconds of game time, with a match credential, and seats ada.
func startTimedArena(t *testing.T, cn clockNode, tenant string, limit int) (string, *game) {
	t.Helper()
	gameSeq++
	id := fmt.Sprintf("progress%d-%d", gameSeq, time.Now().UnixNano())
	if _, err := cn.c.StartGame(context.Background(), connect.NewRequest(&clusterv1.StartGameRequest{TenantId: tenant, GameId: id, BuildId: arenaID,
		Seed: 11, Config: fmt.Appendf(nil, `{"bots":1,"time_limit_s":%d,"score_limit":1000}`, limit), MatchCredential: "lmc_progress"})); err != nil {
		t.Fatal(err)
	}
	g, ok := cn.n.game(tenant, id)
	if !ok {
		t.Fatal("the game is not running")
	}
	cn.join(t, g, tenant, id, "ada")
	return id, g
}

// TestInterimProgressEvery30s: a match reports its players' totals every 30 s
// of game time (sequence: the tick) while it runs, and its final result once
// when it ends; every report is cumulative.
func TestInterimProgressEvery30s(t *testing.T) {
	const tenant = "tenant-progress"
	log := &reportLog{}
	cfg := Config{AbandonGrace: -1, IdleEnd: -1}
	cfg.Results = nodeReporter{log: log, node: "n-progress"}
	cn := startClockNode(t, "n-progress", cfg)
	id, g := startTimedArena(t, cn, tenant, 65)
	const rate = 35         // the arena's tick rate
	const every = 30 * rate // ticks: 30 s of game time, the documented interval

	cn.tickTo(t, g, every+5)
	cn.awaitReports(t, log, "the report at 30 s", id, func(rs []sentReport) bool { return len(rs) == 1 })
	cn.tickTo(t, g, 2*every+5)
	cn.awaitReports(t, log, "the report at 60 s", id, func(rs []sentReport) bool { return len(rs) == 2 })
	cn.tickTo(t, g, 66*rate) // past the end (65 s)
	<-g.done
	rs := log.wait(t, "the final result", id, func(rs []sentReport) bool { return len(rs) == 3 })
	time.Sleep(100 * time.Millisecond) // a second final would be reported right away
	if rs = log.of(id); len(rs) != 3 {
		t.Fatalf("%d reports, want 2 interim and 1 final:%s", len(rs), describeReports(rs))
	}
	for i, want := range []struct {
		seq   int64
		final bool
	}{{every, false}, {2 * every, false}, {65 * rate, true}} {
		if rs[i].seq != want.seq || rs[i].final != want.final {
			t.Errorf("report %d: seq %d final %v; want seq %d final %v", i, rs[i].seq, rs[i].final, want.seq, want.final)
		}
	}
	checkCumulative(t, rs, "ada", joinTickOf(t, tenant, id, "ada"), rate)
	if st := waitStatus(t, tenant, id, func(g clusterstate.Game) bool { return g.Status.Finished() }); st.Status.State != clusterstate.StateEnded {
		t.Fatalf("final status %+v", st.Status)
	}
}

// TestInterimProgressAcrossFailover: a match whose node dies goes on
// reporting from its new owner with sequences that keep growing and totals
// that count from the player's join, not from the failover; its final result
// is reported once, by the node that ended it.
func TestInterimProgressAcrossFailover(t *testing.T) {
	const tenant = "tenant-progress-fo"
	log := &reportLog{}
	cfg := Config{AbandonGrace: -1, IdleEnd: -1}
	cfg.Results = nodeReporter{log: log, node: "n-progress-a"}
	a := startClockNode(t, "n-progress-a", cfg)
	cfg.Results = nodeReporter{log: log, node: "n-progress-b"}
	b := startClockNode(t, "n-progress-b", cfg)
	id, ga := startTimedArena(t, a, tenant, 65)
	const rate = 35
	const every = 30 * rate // ticks: 30 s of game time, the documented interval

	a.tickTo(t, ga, every+40)
	a.awaitReports(t, log, "the report at 30 s", id, func(rs []sentReport) bool { return len(rs) == 1 })
	// The 30 s report's tick is durable before the node dies: the new owner
	// resumes after it.
	for ga.durableTick.Load() <= every {
		a.clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	crash(a.n)
	waitOwner(t, tenant, id, "n-progress-b")
	var gb *game
	for deadline := time.Now().Add(15 * time.Second); gb == nil; time.Sleep(10 * time.Millisecond) {
		gb, _ = b.n.game(tenant, id)
		if time.Now().After(deadline) {
			t.Fatal("the new owner does not run the game")
		}
	}
	if resumed := gb.stepped.Load(); resumed <= every {
		t.Fatalf("resumed at tick %d, before the 30 s report", resumed)
	}
	b.tickTo(t, gb, 66*rate)
	<-gb.done
	rs := log.wait(t, "the final result", id, func(rs []sentReport) bool { return len(rs) == 3 })
	time.Sleep(100 * time.Millisecond)
	if rs = log.of(id); len(rs) != 3 {
		t.Fatalf("%d reports, want 2 interim and 1 final:%s", len(rs), describeReports(rs))
	}
	for i, want := range []struct {
		node  string
		seq   int64
		final bool
	}{{"n-progress-a", every, false}, {"n-progress-b", 2 * every, false}, {"n-progress-b", 65 * rate, true}} {
		if rs[i].node != want.node || rs[i].seq != want.seq || rs[i].final != want.final {
			t.Errorf("report %d: %s seq %d final %v; want %s seq %d final %v", i, rs[i].node, rs[i].seq, rs[i].final, want.node, want.seq, want.final)
		}
	}
	checkCumulative(t, rs, "ada", joinTickOf(t, tenant, id, "ada"), rate)
}

// TestInterimProgressWaitsForItsTick: the report at 30 s is sent only once
// the log holds that tick. It went out as soon as the tick was stepped,
// while the tick was still speculative (in no committed chunk): a node that
// died then had reported progress the game, resumed elsewhere from its log,
// never made.
func TestInterimProgressWaitsForItsTick(t *testing.T) {
	const tenant = "tenant-progress-durable"
	log := &reportLog{}
	var running atomic.Pointer[game]
	var durableAtReport atomic.Int64
	// Room to run on while the log is held (the default bound is 17 ticks,
	// and the race detector's log lags more than that).
	cfg := Config{AbandonGrace: -1, IdleEnd: -1, MaxSpeculation: 3 * time.Second}
	cfg.Results = reporterFunc(func(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error {
		if g := running.Load(); g != nil && !final {
			durableAtReport.Store(g.durableTick.Load())
		}
		return nodeReporter{log: log, node: "n-progress-durable"}.Report(ctx, credential, matchID, seq, final, players)
	})
	cn := startClockNode(t, "n-progress-durable", cfg)
	id, g := startTimedArena(t, cn, tenant, 65)
	running.Store(g)
	const every = 30 * 35 // ticks: 30 s of game time at the arena's 35 Hz

	cn.tickTo(t, g, every-10)
	release := make(chan struct{})
	hold := func() { <-release }
	cn.n.writer.hold.Store(&hold)
	cn.tickTo(t, g, every+1) // within the speculation bound: the game runs on
	time.Sleep(300 * time.Millisecond)
	if rs := log.of(id); len(rs) != 0 {
		close(release)
		t.Fatalf("reported while the log was durable through tick %d:%s", durableAtReport.Load(), describeReports(rs))
	}
	cn.n.writer.hold.Store(nil)
	close(release)
	for deadline := time.Now().Add(10 * time.Second); len(log.of(id)) == 0; time.Sleep(time.Millisecond) {
		cn.clk.Advance(5 * time.Millisecond)
		if time.Now().After(deadline) {
			t.Fatal("no report after the hold")
		}
	}
	rs := log.of(id)
	if rs[0].seq != every || rs[0].final || durableAtReport.Load() < every {
		t.Fatalf("report %+v sent while the log was durable through tick %d; want the interim one at tick %d, durable", rs[0],
			durableAtReport.Load(), every)
	}
}

// reporterFunc is a ResultReporter made of a function.
type reporterFunc func(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error

func (f reporterFunc) Report(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error {
	return f(ctx, credential, matchID, seq, final, players)
}
