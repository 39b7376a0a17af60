package simnode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/simnode/inputlog"
)

// maxFinalMessage bounds the reason kept in a finished game's status (and so
// in its archive): a trap's text must never make the final etcd write too big.
const maxFinalMessage = 4 << 10

// finalMessage clips a finished game's reason to maxFinalMessage bytes of
// valid UTF-8.
func finalMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxFinalMessage {
		return s
	}
	cut := maxFinalMessage - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// flushFinal hands the game's last chunk to the log writer with the final
// status — state, tick and reason — which the archive is made from (see
// archive). It is flushTo's final case (no handoff, no checkpoint) with the
// message, which flushTo's status does not carry; keep the two in step.
func (g *game) flushFinal(ctx context.Context, state, message string) {
	c := g.pending
	c.Ended = state == clusterstate.StateEnded
	g.logSeq++
	if c.Ended {
		// Before the chunk is queued: its commit starts the archive, which
		// delivers the result (report.go).
		g.keepResult(ctx, c)
	}
	st := clusterstate.GameStatus{State: state, Tick: g.inst.Tick(), Players: g.players, NodeID: g.n.cfg.ID, Message: message}
	g.n.writer.enqueue(&appendReq{g: g, seq: g.logSeq, chunk: c, status: st, acks: g.acks, final: true})
	g.acks = nil
	g.pending = &inputlog.Chunk{From: c.To, To: c.To}
	g.chunkBytes = entryBytes(g.entries)
	g.lastFlush = g.n.cfg.Clock.Now()
}

// Archiver stores a finished game's spec and log in the backend (for replays
// and crash reproduction: `ludus ctl game replay GAME`).
type Archiver interface {
	ArchiveGame(ctx context.Context, req *clusterv1.ArchiveGameRequest) error
}

// ArchiveGame implements Archiver over the backend's ModuleStoreService.
func (s *ModuleStore) ArchiveGame(ctx context.Context, req *clusterv1.ArchiveGameRequest) error {
	_, err := s.client.ArchiveGame(ctx, connect.NewRequest(req))
	return err
}

// archive moves a finished game out of etcd: it reads the spec and the whole
// log, delivers an ended game's final result (report.go), stores spec and log
// in the backend, and only then deletes every key of the game from etcd — etcd
// holds coordination and live logs, not history. It retries for a while; a
// game left in etcd is picked up again by the sweep, on whichever node ranks
// first for it. Without an Archiver it only delivers the result this node
// kept, and the game stays in etcd.
func (n *Node) archive(tenant, game string) {
	a, _ := n.cfg.Modules.(Archiver)
	if a == nil && n.results().get(gameKey(tenant, game)) == nil {
		return // nowhere to archive to, and no result of this node's to deliver
	}
	key := gameKey(tenant, game) + "#archive"
	if _, busy := n.resuming.LoadOrStore(key, true); busy {
		return
	}
	defer n.resuming.Delete(key)
	log := n.log.With("tenant", tenant, "game", game)
	delay := 250 * time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := n.archiveOnce(a, tenant, game)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || n.ctx.Err() != nil {
			log.Warn("game not archived yet; it stays in etcd, its result perhaps undelivered, until a sweep archives it", "err", err)
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Second)
	}
}

func (n *Node) archiveOnce(a Archiver, tenant, game string) error {
	rctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	l, err := n.cfg.Etcd.ReadLog(rctx, tenant, game)
	if errors.Is(err, clusterstate.ErrGameNotFound) {
		n.results().drop(gameKey(tenant, game))
		return nil // already archived and removed
	}
	if err != nil {
		return err
	}
	if l.Owner != "" {
		return fmt.Errorf("game %s still has an owner", game)
	}
	st := l.Status
	if !st.Finished() {
		return fmt.Errorf("game %s is %q, not finished", game, st.State)
	}
	// The result first: once the log leaves etcd nothing is left to read it
	// from. Only a node that can archive replays the log for it: without an
	// archive the game stays in etcd, and every sweep would replay it again.
	if err := n.deliverResult(tenant, game, l, a != nil); err != nil {
		return err
	}
	if a == nil {
		n.results().drop(gameKey(tenant, game))
		return nil
	}
	// Timed from here: a replay for the result may have taken a while.
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	req := &clusterv1.ArchiveGameRequest{TenantId: tenant, GameId: game, SpecJson: l.SpecJSON, // the backend strips the match credential
		State: st.State, Message: st.Message, FinalTick: st.Tick}
	for _, c := range l.Chunks {
		req.Chunks = append(req.Chunks, c.Data)
	}
	if gl := n.guestLogs().get(gameKey(tenant, game)); gl != nil && gl.finished() {
		req.GuestLog = gl.snapshot()
	}
	if req.FinalTick == 0 && len(req.Chunks) > 0 {
		// A status written without the tick (a game failed on takeover): the
		// log knows where it ended.
		if c, err := inputlog.Decode(req.Chunks[len(req.Chunks)-1]); err == nil {
			req.FinalTick = c.To
		}
	}
	if err := a.ArchiveGame(ctx, req); tooBigToArchive(err) && len(req.Chunks) > 0 {
		// The log is larger than an archive holds (bytes or chunks): it
		// never will fit, and a game that is never archived stays in etcd
		// for good, read whole by every sweep. Keep the game's record
		// without its log, saying so; the result was delivered above.
		size := 0
		for _, c := range req.Chunks {
			size += len(c)
		}
		n.log.Error("game log too large to archive; archiving the game without it", "tenant", tenant, "game", game,
			"chunks", len(req.Chunks), "bytes", size, "err", err)
		req.Message = fmt.Sprintf("%s (its input log, %d bytes in %d chunks, was larger than an archive holds and was not kept)",
			req.Message, size, len(req.Chunks))
		req.Chunks = nil
		if err := a.ArchiveGame(ctx, req); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	// Delete only what was archived: the spec's create revision must be unchanged.
	_, err = n.cfg.Etcd.RemoveGame(ctx, tenant, game, l.SpecRevision)
	if err == nil {
		n.results().drop(gameKey(tenant, game))
		n.log.Info("game log archived and removed from etcd", "tenant", tenant, "game", game, "chunks", len(req.Chunks), "state", st.State)
	}
	return err
}

// tooBigToArchive reports whether the backend refused an archive for its
// size (ResourceExhausted: its bytes, or a message too large to read;
// InvalidArgument naming the chunks: their count), which no retry changes.
func tooBigToArchive(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code() {
	case connect.CodeResourceExhausted:
		return true
	case connect.CodeInvalidArgument:
		return strings.Contains(ce.Message(), "chunks")
	}
	return false
}
