package simnode

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/internal/clock"
)

func TestTickScheduleDoesNotDrift(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	period := time.Second / 35
	s := tickSchedule{start: t0, startTick: 0, period: period, maxLag: 500 * time.Millisecond}
	// Tick 1 ran 10 ms late: tick 2 is still due at 2 periods, not 2 periods + 10 ms.
	due, wait := s.next(1, t0.Add(period+10*time.Millisecond))
	if !due.Equal(t0.Add(2*period)) || wait != period-10*time.Millisecond {
		t.Fatalf("next after a late tick: due %v wait %v", due.Sub(t0), wait)
	}
	// Behind by less than maxLag: no wait, catch up.
	if _, wait := s.next(3, t0.Add(4*period+100*time.Millisecond)); wait != 0 {
		t.Fatalf("behind by 100 ms: wait %v, want 0 (catch up)", wait)
	}
	// Behind by more than maxLag (a stalled machine): a new schedule from now.
	now := t0.Add(time.Minute)
	due, wait = s.next(10, now)
	if !due.Equal(now.Add(period)) || wait != period || s.startTick != 10 || !s.start.Equal(now) {
		t.Fatalf("after a stall: due %v wait %v, schedule %+v", due.Sub(now), wait, s)
	}
	due, _ = s.next(11, now.Add(period))
	if !due.Equal(now.Add(2 * period)) {
		t.Fatalf("the new schedule drifts: due %v", due.Sub(now))
	}
}

// TestGamesTickOnTheNodesClock: a game steps only when the node's clock says
// a tick is due, so a test drives it without sleeping out the ticks.
func TestGamesTickOnTheNodesClock(t *testing.T) {
	clk := clock.NewFake()
	n, err := New(Config{ID: "n-clock", Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{},
		ClusterToken: testToken, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	c := clusterv1connect.NewNodeServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(bearer.Token(testToken)))
	id := createGame(t, c, "tenant-clock", 1)
	tick := func() int64 {
		g, err := c.GetGame(context.Background(), connect.NewRequest(&clusterv1.GetGameRequest{TenantId: "tenant-clock", GameId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return g.Msg.Game.Tick
	}
	time.Sleep(300 * time.Millisecond) // ~10 ticks of real time
	if got := tick(); got != 0 {
		t.Fatalf("the game stepped to tick %d while its clock stood still", got)
	}
	clk.Drive(t, time.Second/35, "the game reaches tick 5", func() bool { return tick() >= 5 })
}
