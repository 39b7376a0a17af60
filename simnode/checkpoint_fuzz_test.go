package simnode

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// realCheckpoint steps a game of wasm for ticks and returns its checkpoint, as
// maybeCheckpoint takes it (seq is the chunk it ends).
func realCheckpoint(tb testing.TB, wasm []byte, config string, ticks int, seq uint64) *checkpoint {
	tb.Helper()
	ctx := context.Background()
	m, err := testEng.Compile(ctx, wasm)
	if err != nil {
		tb.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, 5)
	if err != nil {
		tb.Fatal(err)
	}
	defer inst.Close(ctx)
	if err := inst.Init(ctx, 5, []byte(config)); err != nil {
		tb.Fatal(err)
	}
	for range ticks {
		if _, err := inst.Step(ctx, nil); err != nil {
			tb.Fatal(err)
		}
	}
	state, err := inst.Save(ctx)
	if err != nil || len(state) == 0 {
		tb.Fatalf("save: %d bytes, %v", len(state), err)
	}
	h, err := inst.StateHash(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return &checkpoint{Tick: inst.Tick(), Seq: seq, Hash: h, State: state}
}

// FuzzDecodeCheckpoint: checkpoints are read from etcd, where another node
// wrote them. Decoding never panics; what it accepts is a checkpoint a node
// could have written — a tick that is not negative, a state of 1 byte to
// maxCheckpointBytes — and encodes back to the same bytes; what it rejects
// comes back as an error and no checkpoint.
func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(realCheckpoint(f, builtin.Arena, `{"bots":4}`, 70, 3).encode())
	f.Add(realCheckpoint(f, builtin.Pong, "", 35, 1).encode())
	f.Add((&checkpoint{Tick: 0, Seq: 0, Hash: 0, State: []byte{0}}).encode())
	f.Add((&checkpoint{Tick: -1, Seq: 1, Hash: 2, State: []byte("x")}).encode())
	f.Add((&checkpoint{Tick: 1, Seq: 1, Hash: 2}).encode())
	f.Add([]byte(checkpointMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			if c != nil {
				t.Fatalf("rejected (%v) but returned %+v", err, c)
			}
			return
		}
		if c.Tick < 0 || len(c.State) == 0 || len(c.State) > maxCheckpointBytes {
			t.Fatalf("accepted a checkpoint no node writes: tick %d, %d bytes of state", c.Tick, len(c.State))
		}
		if e := c.encode(); !bytes.Equal(e, b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, e)
		}
	})
}

// FuzzCheckpointRoundTrip: every checkpoint a node writes decodes to itself.
func FuzzCheckpointRoundTrip(f *testing.F) {
	real := realCheckpoint(f, builtin.Pong, "", 35, 1)
	f.Add(real.Tick, real.Seq, real.Hash, real.State)
	f.Add(int64(0), uint64(0), uint64(0), []byte{0})
	f.Add(int64(-5), uint64(1), uint64(1), []byte("x"))
	f.Fuzz(func(t *testing.T, tick int64, seq, hash uint64, state []byte) {
		c := &checkpoint{Tick: tick, Seq: seq, Hash: hash, State: state}
		d, err := decodeCheckpoint(c.encode())
		valid := tick >= 0 && len(state) > 0 && len(state) <= maxCheckpointBytes
		switch {
		case valid && err != nil:
			t.Fatalf("a valid checkpoint did not decode: %v", err)
		case !valid && err == nil:
			t.Fatalf("an invalid checkpoint (tick %d, %d bytes) decoded", tick, len(state))
		case valid && (d.Tick != c.Tick || d.Seq != c.Seq || d.Hash != c.Hash || !bytes.Equal(d.State, c.State)):
			t.Fatalf("round trip: %+v became %+v", c, d)
		}
	})
}

// TestCheckpointMustFitTheLog: a checkpoint that does not end a chunk of the
// log — its chunk is missing, or ends at another tick — is not used, even
// when its state verifies against its own hash: the game is replayed from
// its seed, and ends up where the log says.
func TestCheckpointMustFitTheLog(t *testing.T) {
	ctx := context.Background()
	m, err := testEng.Compile(ctx, builtin.Pong)
	if err != nil {
		t.Fatal(err)
	}
	spec := clusterstate.GameSpec{TenantID: "t", GameID: "g", BuildID: engine.BuildID(builtin.Pong), Seed: 5, TickRate: 60}
	ck := realCheckpoint(t, builtin.Pong, "", 100, 1) // a real state, at tick 100
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		seq  uint64
	}{{"its chunk ends at another tick", 2}, {"its chunk is not in the log", 5}} {
		chunks := []*inputlog.Chunk{{From: 0, To: 40}, {From: 40, To: 120}}
		ck.Seq = tc.seq
		inst, _, fromCk, err := replayFrom(ctx, m, spec, chunks, []uint64{1, 2}, ck, engine.InstanceOptions{}, log)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if fromCk || inst.Tick() != 120 {
			t.Errorf("%s: replay used the checkpoint: %v, at tick %d; want tick 120 from the seed", tc.name, fromCk, inst.Tick())
		}
		inst.Close(ctx)
	}
	// The checkpoint of chunk 2, which ends at tick 100, is used.
	chunks := []*inputlog.Chunk{{From: 0, To: 40}, {From: 40, To: 100}, {From: 100, To: 120}}
	ck.Seq = 2
	inst, _, fromCk, err := replayFrom(ctx, m, spec, chunks, []uint64{1, 2, 3}, ck, engine.InstanceOptions{}, log)
	if err != nil || !fromCk || inst.Tick() != 120 {
		t.Fatalf("a fitting checkpoint: used %v, tick %d, %v", fromCk, inst.Tick(), err)
	}
	inst.Close(ctx)
}
