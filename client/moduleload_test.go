package client

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// slowModules serves the arena module after delay; served (if not nil) hears
// whether each request finished (true) or was abandoned by the client (false).
func slowModules(delay time.Duration, served chan<- bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			if served != nil {
				served <- false
			}
			return
		}
		_, _ = w.Write(builtin.Arena)
		if served != nil {
			served <- true
		}
	}
}

// Two loads of one module: the first caller's context ends while the load
// runs; the second caller, whose context is alive, still gets the module (it
// got the first caller's context error, and its session fell back to pixels
// for good).
func TestModuleWaiterOutlivesFirstCaller(t *testing.T) {
	g := arenaGame()
	a := &playGateway{fakeGateway: &fakeGateway{game: g}}
	a.play = func(ctx context.Context, n int32, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
		<-ctx.Done()
		return nil
	}
	c := dialFake(t, a.start(t, slowModules(time.Second, nil)))
	ctxB, cancelB := context.WithTimeout(context.Background(), time.Minute)
	defer cancelB()

	ctxA, cancelA := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelA()
	errA := make(chan error, 1)
	go func() { _, err := c.Module(ctxA, g.BuildId); errA <- err }()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.Module(ctxB, g.BuildId); err != nil {
		t.Fatalf("the second caller, its context alive, got %v", err)
	}
	if err := <-errA; err == nil {
		t.Errorf("the first caller, its context done after 300 ms, got the module of a 1 s load")
	}

	// The same through Play: a session whose context is alive keeps
	// snapshots (a fresh client, so the module is not cached).
	c2 := dialFake(t, a.start(t, slowModules(time.Second, nil)))
	ctxA2, cancelA2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelA2()
	go func() { _, _ = c2.Module(ctxA2, g.BuildId) }()
	time.Sleep(100 * time.Millisecond)
	s, err := c2.Play(ctxB, "g1", Snapshots)
	if err != nil {
		t.Fatalf("play: %v", err)
	}
	defer s.Close()
	if s.Mode() != Snapshots {
		t.Fatalf("session mode %v, fallback %v; want snapshots", s.Mode(), s.Fallback())
	}
}

// A load nobody waits for any more stops: its download is abandoned.
func TestModuleLoadStopsWhenNobodyWaits(t *testing.T) {
	g := arenaGame()
	a := &playGateway{fakeGateway: &fakeGateway{game: g}}
	served := make(chan bool, 4)
	c := dialFake(t, a.start(t, slowModules(10*time.Second, served)))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Module(ctx, g.BuildId); err == nil {
		t.Fatal("a 10 s load finished within 200 ms")
	}
	select {
	case ok := <-served:
		if ok {
			t.Fatal("the download finished although nobody waited for it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the download still runs 5 s after its only caller left")
	}
}
