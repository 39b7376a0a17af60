package simnode

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// TestCrashReplaysAtItsTick: a match whose module traps at a known tick keeps
// a crash record (status failed, naming the tick and the module's words), and
// replaying its input log reproduces the same trap at the same tick, which is
// what `ludus ctl game replay` does with an archived game.
func TestCrashReplaysAtItsTick(t *testing.T) {
	n, _ := startTalkerNode(t, "n-crash", nil)
	id := startTalker(t, n, `{"panic_at":40}`)
	g := waitStatus(t, "tenant-talk", id, func(g clusterstate.Game) bool { return g.Status.State == clusterstate.StateFailed })
	if !strings.Contains(g.Status.Message, "tick 40") || !strings.Contains(g.Status.Message, "talker: boom at tick 40") {
		t.Fatalf("crash record %q does not name the tick and the module's words", g.Status.Message)
	}
	ctx := context.Background()
	log, err := state.ReadLog(ctx, "tenant-talk", id)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []*inputlog.Chunk
	for _, c := range log.Chunks {
		ch, err := inputlog.Decode(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, ch)
	}
	_, _, err = Replay(ctx, testEng, talker(t), log.Spec, chunks)
	var trap *engine.TrapError
	if !errors.As(err, &trap) {
		t.Fatalf("replay: %v; want the module's trap", err)
	}
	if trap.Tick != 40 || !strings.Contains(trap.Error(), "talker: boom at tick 40") {
		t.Fatalf("replay trapped at tick %d: %v; want tick 40 with the module's message", trap.Tick, trap)
	}
}
