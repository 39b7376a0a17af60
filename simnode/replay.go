package simnode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/sdk/abi"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// DesyncError reports a replay whose state hash differs from the one the owner
// recorded: the module is not deterministic, or the log is damaged.
type DesyncError struct {
	Tick      int64
	Want, Got uint64
	BuildID   string
	GameID    string
}

func (e *DesyncError) Error() string {
	return fmt.Sprintf("desync in game %s (build %.12s) at tick %d: recorded state hash %016x, replay gives %016x",
		e.GameID, e.BuildID, e.Tick, e.Want, e.Got)
}

// ReadLog reads a game's spec and every chunk of its input log from etcd.
func ReadLog(ctx context.Context, cli *clientv3.Client, tenant, game string) (fleet.GameSpec, []*inputlog.Chunk, error) {
	spec, chunks, _, err := readLog(ctx, cli, tenant, game)
	return spec, chunks, err
}

func readLog(ctx context.Context, cli *clientv3.Client, tenant, game string) (fleet.GameSpec, []*inputlog.Chunk, []string, error) {
	var spec fleet.GameSpec
	// One transaction: the spec and the log as of the same revision.
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpGet(fleet.GameKey(tenant, game)),
		clientv3.OpGet(fleet.LogPrefix(tenant, game), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)),
	).Commit()
	if err != nil {
		return spec, nil, nil, err
	}
	specKV := resp.Responses[0].GetResponseRange().Kvs
	if len(specKV) == 0 {
		return spec, nil, nil, fmt.Errorf("%w: game %s", fleet.ErrNotFound, game)
	}
	if err := json.Unmarshal(specKV[0].Value, &spec); err != nil {
		return spec, nil, nil, err
	}
	logs := resp.Responses[1].GetResponseRange().Kvs
	chunks := make([]*inputlog.Chunk, 0, len(logs))
	keys := make([]string, 0, len(logs))
	for _, kv := range logs {
		c, err := inputlog.Decode(kv.Value)
		if err != nil {
			return spec, nil, nil, fmt.Errorf("log chunk %s: %w", kv.Key, err)
		}
		chunks = append(chunks, c)
		keys = append(keys, string(kv.Key))
	}
	return spec, chunks, keys, nil
}

// Replay rebuilds a game from its spec and log on a fresh instance, checking
// every recorded state hash. It returns the instance positioned after the last
// logged tick (the caller owns and closes it) and the hashes it computed.
func Replay(ctx context.Context, eng *engine.Engine, wasm []byte, spec fleet.GameSpec, chunks []*inputlog.Chunk) (*engine.Instance, []inputlog.Hash, error) {
	m, err := eng.Compile(ctx, wasm)
	if err != nil {
		return nil, nil, err
	}
	return ReplayModule(ctx, m, spec, chunks)
}

// ReplayModule is Replay with a compiled module.
func ReplayModule(ctx context.Context, m *engine.Module, spec fleet.GameSpec, chunks []*inputlog.Chunk) (*engine.Instance, []inputlog.Hash, error) {
	if m.BuildID != spec.BuildID {
		return nil, nil, fmt.Errorf("replay: game %s is pinned to build %s, not %s", spec.GameID, spec.BuildID, m.BuildID)
	}
	inst, err := m.Instantiate(ctx, spec.Seed)
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
func replayChunks(ctx context.Context, inst *engine.Instance, spec fleet.GameSpec, chunks []*inputlog.Chunk) ([]inputlog.Hash, error) {
	var hashes []inputlog.Hash
	var events []abi.Event
	for ci, c := range chunks {
		if c.From != inst.Tick() {
			return nil, fmt.Errorf("log chunk %d starts at tick %d, replay is at tick %d: the log has a gap", ci, c.From, inst.Tick())
		}
		e, h := 0, 0
		for inst.Tick() < c.To {
			t := inst.Tick()
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
					desyncs.WithLabelValues(spec.BuildID).Inc()
					slog.Warn("desync: replay state hash differs from the recorded one", "tenant", spec.TenantID, "game", spec.GameID,
						"build", spec.BuildID, "tick", inst.Tick(), "want", fmt.Sprintf("%016x", c.Hashes[h].Hash), "got", fmt.Sprintf("%016x", got))
					return hashes, &DesyncError{Tick: inst.Tick(), Want: c.Hashes[h].Hash, Got: got, BuildID: spec.BuildID, GameID: spec.GameID}
				}
				h++
			}
		}
	}
	return hashes, nil
}
