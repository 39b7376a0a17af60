package simnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/simnode/inputlog"
)

// TestReplayPastTheModulesEndIsADesync guards replay against a log that goes
// on after the replayed module ended (the replay diverged from the run that
// wrote the log between two recorded state hashes). An ended instance no
// longer advances, and replay used to loop forever on it, holding a resume
// (and its claim) for good. It must return promptly with a DesyncError
// naming the tick where the module ended.
func TestReplayPastTheModulesEndIsADesync(t *testing.T) {
	ctx := context.Background()
	m, err := testEng.Compile(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	// Where pong without players ends on its own.
	inst, err := m.Instantiate(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Init(ctx, 7, nil); err != nil {
		t.Fatal(err)
	}
	end := int64(-1)
	for i := 0; i < 100000 && end < 0; i++ {
		ended, err := inst.Step(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			end = inst.Tick()
		}
	}
	inst.Close(ctx)
	if end < 0 {
		t.Fatal("pong without players never ends: the test needs a module that does")
	}
	spec := clusterstate.GameSpec{GameID: "past-end", BuildID: pongID, Seed: 7, TickRate: m.Meta.TickRate, MaxPlayers: m.Meta.MaxPlayers}
	done := make(chan error, 1)
	go func() {
		inst, _, err := ReplayModule(ctx, m, spec, []*inputlog.Chunk{{From: 0, To: end}, {From: end, To: end + 10}})
		if err == nil {
			inst.Close(ctx)
		}
		done <- err
	}()
	select {
	case err := <-done:
		var de *DesyncError
		if !errors.As(err, &de) || de.Tick != end || de.LogEnd != end+10 {
			t.Fatalf("replay 10 ticks past the module's end (tick %d) returned %v, want a desync at tick %d", end, err, end)
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatalf("replay of a log 10 ticks past the module's end (tick %d) has not returned after 10 s", end)
	}
}

// TestReplayStopsWhenItsContextEnds guards the replay loop's budget: a
// replay whose context is done returns the context's error instead of
// stepping on through the log (a resume's deadline must bound it). The
// instance is set up on a live context and replayed on a cancelled one, so
// the loop itself must notice.
func TestReplayStopsWhenItsContextEnds(t *testing.T) {
	bg := context.Background()
	m, err := testEng.Compile(bg, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	spec := clusterstate.GameSpec{GameID: "ctx-end", BuildID: arenaID, Seed: 7, TickRate: m.Meta.TickRate, MaxPlayers: m.Meta.MaxPlayers}
	inst, err := m.Instantiate(bg, spec.Seed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(bg)
	if err := inst.Init(bg, spec.Seed, spec.Config); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	done := make(chan error, 1)
	go func() {
		_, err := replayChunks(ctx, inst, spec, []*inputlog.Chunk{{From: 0, To: 1 << 40}})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("replay returned %v, want its context's error", err)
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("a replay whose context was cancelled is still stepping after 10 s")
	}
}
