package simnode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// Checkpoints bound replay time. When a module exports ludus_save/ludus_load,
// the owner saves the game's state every CheckpointEvery of game time at a chunk
// boundary and writes it in the same fenced transaction as that chunk, so a
// checkpoint always matches a prefix of the log. A node resuming the game loads
// the newest checkpoint, checks its state hash, and replays only the chunks
// after it; a checkpoint that does not verify, or does not end a chunk of the
// log, is ignored (full replay).

// checkpoint is a saved state at the end of log chunk Seq (after Tick steps).
type checkpoint struct {
	Tick  int64
	Seq   uint64
	Hash  uint64
	State []byte
}

const checkpointMagic = "LCK1"

// maxCheckpointBytes keeps a checkpoint well inside etcd's request limit.
const maxCheckpointBytes = 512 << 10

func (c *checkpoint) encode() []byte {
	b := make([]byte, 0, 28+len(c.State))
	b = append(b, checkpointMagic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Tick))
	b = binary.LittleEndian.AppendUint64(b, c.Seq)
	b = binary.LittleEndian.AppendUint64(b, c.Hash)
	return append(b, c.State...)
}

// decodeCheckpoint decodes what encode wrote. Checkpoints come from etcd, where
// another node wrote them, so it refuses what no node writes: a negative tick,
// an empty state or one over maxCheckpointBytes. Whether the checkpoint fits
// the game's log is replayFrom's to check (fits).
func decodeCheckpoint(b []byte) (*checkpoint, error) {
	if len(b) < 28 || string(b[:4]) != checkpointMagic {
		return nil, errors.New("not a checkpoint")
	}
	c := &checkpoint{
		Tick:  int64(binary.LittleEndian.Uint64(b[4:])),
		Seq:   binary.LittleEndian.Uint64(b[12:]),
		Hash:  binary.LittleEndian.Uint64(b[20:]),
		State: b[28:],
	}
	switch {
	case c.Tick < 0:
		return nil, fmt.Errorf("checkpoint at tick %d", c.Tick)
	case len(c.State) == 0:
		return nil, errors.New("checkpoint without a state")
	case len(c.State) > maxCheckpointBytes:
		return nil, fmt.Errorf("checkpoint of %d bytes, over the %d bytes a node writes", len(c.State), maxCheckpointBytes)
	}
	return c, nil
}

// fits checks that the checkpoint ends a chunk of the log (chunks, with their
// seqs): a checkpoint is written with the chunk it ends, at the chunk's last
// tick. One that does not fit would resume the game at another tick than its
// log's, or skip chunks.
func (c *checkpoint) fits(chunks []*inputlog.Chunk, seqs []uint64) error {
	for i, s := range seqs {
		if s != c.Seq || i >= len(chunks) {
			continue
		}
		if chunks[i].To != c.Tick {
			return fmt.Errorf("the checkpoint of chunk %d is at tick %d, but the chunk ends at tick %d", c.Seq, c.Tick, chunks[i].To)
		}
		return nil
	}
	return fmt.Errorf("the checkpoint is of chunk %d, which the log does not have", c.Seq)
}

// maybeCheckpoint saves the game's state for the chunk about to be flushed
// when one is due. The state is taken at the chunk's end (the current tick).
func (g *game) maybeCheckpoint(ctx context.Context) *checkpoint {
	if !g.hasCheckpoint || g.n.cfg.CheckpointEvery <= 0 {
		return nil
	}
	every := int64(g.n.cfg.CheckpointEvery/time.Millisecond) * int64(g.spec.TickRate) / 1000
	if g.inst.Tick()-g.lastCheckpoint < max(every, 1) {
		return nil
	}
	state, err := g.inst.Save(ctx)
	if err != nil || len(state) == 0 || len(state) > maxCheckpointBytes {
		return nil
	}
	h, err := g.inst.StateHash(ctx)
	if err != nil {
		return nil
	}
	g.lastCheckpoint = g.inst.Tick()
	return &checkpoint{Tick: g.inst.Tick(), Hash: h, State: state}
}

// replayFrom rebuilds a game from a verified checkpoint plus the chunks after
// it, or from the seed when there is no usable checkpoint, on an instance
// with opts (the node's per-match limits: the instance goes on running the
// game). It reports whether the checkpoint was used.
func replayFrom(ctx context.Context, m *engine.Module, spec clusterstate.GameSpec, chunks []*inputlog.Chunk, seqs []uint64, ck *checkpoint, opts engine.InstanceOptions, log *slog.Logger) (*engine.Instance, []inputlog.Hash, bool, error) {
	if ck != nil {
		if err := ck.fits(chunks, seqs); err != nil {
			log.Warn("checkpoint does not fit the log; replaying the whole log", "tick", ck.Tick, "err", err)
			ck = nil
		}
	}
	if ck != nil {
		inst, err := m.InstantiateWith(ctx, spec.Seed, opts)
		if err == nil {
			err = inst.Init(ctx, spec.Seed, spec.Config)
			if err == nil {
				err = inst.Load(ctx, ck.Tick, ck.State)
			}
			var h uint64
			if err == nil {
				h, err = inst.StateHash(ctx)
				if err == nil && h != ck.Hash {
					err = fmt.Errorf("checkpoint at tick %d restores state hash %016x, recorded %016x", ck.Tick, h, ck.Hash)
				}
			}
			if err == nil {
				var rest []*inputlog.Chunk
				for i, c := range chunks {
					if seqs[i] > ck.Seq {
						rest = append(rest, c)
					}
				}
				hashes, err := replayChunks(ctx, inst, spec, rest)
				if err == nil {
					return inst, hashes, true, nil
				}
				var d *DesyncError
				if errors.As(err, &d) {
					inst.Close(ctx)
					return nil, hashes, true, err
				}
			}
			inst.Close(ctx)
			log.Warn("checkpoint unusable; replaying the whole log", "tick", ck.Tick, "err", err)
		}
	}
	inst, hashes, err := replayWith(ctx, m, spec, chunks, opts)
	return inst, hashes, false, err
}
