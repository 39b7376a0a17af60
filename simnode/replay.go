package simnode

import (
	"context"
	"fmt"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// DesyncError reports a replay whose state hash differs from the one the owner
// recorded: the module is not deterministic, or the log is damaged.
type DesyncError struct {
	// Tick is the first tick whose recorded state hash differs.
	Tick      int64
	Want, Got uint64
	BuildID   string
	GameID    string
	// Matched is the last tick whose state hash matched (0 if none was
	// checked before): the state first differs at a tick in (Matched, Tick].
	Matched int64
	// LogEnd, when set, is how far the log goes past Tick, where the
	// replayed module ended (its ludus_step said so) though the original
	// run went on: no state hash differed yet, but the runs have diverged.
	LogEnd int64
}

// DesyncCauses is what a desync message suggests to look for.
const DesyncCauses = "likely causes: a View or state hash that changes state, wall-clock time or host randomness, " +
	"map iteration order; run `ludus ctl module check FILE` or the sdktest harness to find it"

func (e *DesyncError) Error() string {
	matched := ""
	if e.Matched > 0 {
		matched = fmt.Sprintf(" (it still matched at tick %d)", e.Matched)
	}
	if e.LogEnd > 0 {
		return fmt.Sprintf("desync in game %s (build %.12s) at tick %d%s: the replay ended the match there, the recorded run went on to tick %d; %s",
			e.GameID, e.BuildID, e.Tick, matched, e.LogEnd, DesyncCauses)
	}
	return fmt.Sprintf("desync in game %s (build %.12s) at tick %d%s: recorded state hash %016x, replay gives %016x; %s",
		e.GameID, e.BuildID, e.Tick, matched, e.Want, e.Got, DesyncCauses)
}

// ReadLog reads a game's spec and every chunk of its input log from etcd.
func ReadLog(ctx context.Context, cli *clusterstate.Client, tenant, game string) (clusterstate.GameSpec, []*inputlog.Chunk, error) {
	spec, chunks, _, err := readLog(ctx, cli, tenant, game)
	return spec, chunks, err
}

// readLog is ReadLog that also returns each chunk's sequence number.
func readLog(ctx context.Context, cli *clusterstate.Client, tenant, game string) (clusterstate.GameSpec, []*inputlog.Chunk, []uint64, error) {
	// One transaction: the spec and the log as of the same revision.
	l, err := cli.ReadLog(ctx, tenant, game)
	if err != nil {
		return clusterstate.GameSpec{}, nil, nil, err
	}
	chunks, seqs, err := decodeChunks(l.Chunks)
	return l.Spec, chunks, seqs, err
}

// decodeChunks decodes log chunks as read from etcd.
func decodeChunks(raw []clusterstate.LogChunk) ([]*inputlog.Chunk, []uint64, error) {
	chunks := make([]*inputlog.Chunk, 0, len(raw))
	seqs := make([]uint64, 0, len(raw))
	for _, r := range raw {
		c, err := inputlog.Decode(r.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("log chunk %016x: %w", r.Seq, err)
		}
		chunks = append(chunks, c)
		seqs = append(seqs, r.Seq)
	}
	return chunks, seqs, nil
}

// Replay rebuilds a game from its spec and log on a fresh instance, checking
// every recorded state hash. It returns the instance positioned after the last
// logged tick (the caller owns and closes it) and the hashes it computed.
func Replay(ctx context.Context, eng *engine.Engine, wasm []byte, spec clusterstate.GameSpec, chunks []*inputlog.Chunk) (*engine.Instance, []inputlog.Hash, error) {
	m, err := eng.Compile(ctx, wasm)
	if err != nil {
		return nil, nil, err
	}
	return ReplayModule(ctx, m, spec, chunks)
}

// ReplayModule is Replay with a compiled module.
func ReplayModule(ctx context.Context, m *engine.Module, spec clusterstate.GameSpec, chunks []*inputlog.Chunk) (*engine.Instance, []inputlog.Hash, error) {
	return replayWith(ctx, m, spec, chunks, engine.InstanceOptions{})
}

// replayWith is ReplayModule on an instance with opts (a node's per-match
// limits, for a game it takes over and goes on running).
func replayWith(ctx context.Context, m *engine.Module, spec clusterstate.GameSpec, chunks []*inputlog.Chunk, opts engine.InstanceOptions) (*engine.Instance, []inputlog.Hash, error) {
	if m.BuildID != spec.BuildID {
		return nil, nil, fmt.Errorf("replay: game %s is pinned to build %s, not %s", spec.GameID, spec.BuildID, m.BuildID)
	}
	inst, err := m.InstantiateWith(ctx, spec.Seed, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := inst.Init(ctx, spec.Seed, spec.Config); err != nil {
		inst.Close(ctx)
		return nil, nil, err
	}
	hashes, err := replayChunks(ctx, inst, spec, chunks)
	if err != nil {
		inst.Close(ctx)
		return nil, hashes, err
	}
	return inst, hashes, nil
}

// replayChunks steps inst through chunks (which must start at its tick),
// checking every recorded state hash. It does not close inst.
func replayChunks(ctx context.Context, inst *engine.Instance, spec clusterstate.GameSpec, chunks []*inputlog.Chunk) ([]inputlog.Hash, error) {
	var hashes []inputlog.Hash
	var events []abi.Event
	matched := int64(0)
	for ci, c := range chunks {
		if c.From != inst.Tick() {
			return nil, fmt.Errorf("log chunk %d starts at tick %d, replay is at tick %d: the log has a gap", ci, c.From, inst.Tick())
		}
		e, h := 0, 0
		for inst.Tick() < c.To {
			t := inst.Tick()
			// An ended instance no longer advances (Step returns at once), so
			// a log that goes on past the module's end would loop here
			// forever: the replay diverged from the run that wrote the log.
			if inst.Ended() {
				desyncs.WithLabelValues(spec.BuildID).Inc()
				return hashes, &DesyncError{Tick: t, BuildID: spec.BuildID, GameID: spec.GameID, Matched: matched,
					LogEnd: chunks[len(chunks)-1].To}
			}
			// A long log is replayed within its caller's budget (a resume's
			// deadline, a node shutting down), not past it.
			if err := ctx.Err(); err != nil {
				return hashes, fmt.Errorf("replay stopped at tick %d of %d: %w", t, chunks[len(chunks)-1].To, err)
			}
			events = events[:0]
			for e < len(c.Entries) && c.Entries[e].Tick == t {
				events = append(events, c.Entries[e].Event)
				e++
			}
			if _, err := inst.Step(ctx, events); err != nil {
				return hashes, err
			}
			for h < len(c.Hashes) && c.Hashes[h].Tick == inst.Tick() {
				got, err := inst.StateHash(ctx)
				if err != nil {
					return hashes, err
				}
				hashes = append(hashes, inputlog.Hash{Tick: inst.Tick(), Hash: got})
				if got != c.Hashes[h].Hash {
					// Counted here; logged by the caller, whose logger names the node.
					desyncs.WithLabelValues(spec.BuildID).Inc()
					return hashes, &DesyncError{Tick: inst.Tick(), Want: c.Hashes[h].Hash, Got: got, BuildID: spec.BuildID, GameID: spec.GameID,
						Matched: matched}
				}
				matched = inst.Tick()
				h++
			}
		}
	}
	return hashes, nil
}
