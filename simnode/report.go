package simnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/inputlog"
)

// ResultReporter delivers a match's interim progress and final result to the
// backend with the match's own credential (lesson 3 of the brief: the
// simulation never holds database credentials). The final result goes out
// once the match's last log chunk is durable, perhaps from another node and
// more than once ("Final results" below): the backend applies it once.
type ResultReporter interface {
	Report(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error
}

// BackendReporter reports to the backend's MatchReportService.
type BackendReporter struct {
	client ludusv1connect.MatchReportServiceClient
}

// NewBackendReporter returns a ResultReporter calling the backend at baseURL.
func NewBackendReporter(hc *http.Client, baseURL string) *BackendReporter {
	return &BackendReporter{client: ludusv1connect.NewMatchReportServiceClient(hc, baseURL)}
}

// Report implements ResultReporter. Reports are cumulative and keyed by match
// and sequence, so a retry or a duplicate after failover grants nothing twice.
func (b *BackendReporter) Report(ctx context.Context, credential, matchID string, seq int64, final bool, players []*ludusv1.PlayerResult) error {
	if final {
		req := connect.NewRequest(&ludusv1.ReportMatchResultRequest{MatchId: matchID, Seq: seq, Players: players})
		req.Header().Set("Authorization", "Bearer "+credential)
		_, err := b.client.ReportMatchResult(ctx, req)
		return err
	}
	req := connect.NewRequest(&ludusv1.ReportProgressRequest{MatchId: matchID, Seq: seq, Players: players})
	req.Header().Set("Authorization", "Bearer "+credential)
	_, err := b.client.ReportProgress(ctx, req)
	return err
}

// progressEvery is the interval of interim progress reports, in game time.
const progressEvery = 30 * time.Second

// resultPlayers asks the module for its current result and maps slots to the
// accounts that hold them (bots have no account and are not reported, but
// count for the places).
func (g *game) resultPlayers(ctx context.Context) ([]*ludusv1.PlayerResult, error) {
	raw, err := g.inst.Result(ctx)
	if err != nil {
		return nil, err
	}
	r, err := decodeResult(raw)
	if err != nil {
		return nil, err
	}
	if r.ignored > 0 {
		// At info level once per game, so that a studio reading the node's
		// log finds it; the result is read again every 30 s.
		level := slog.LevelDebug
		if !g.saidIgnored {
			level, g.saidIgnored = slog.LevelInfo, true
		}
		g.log.Log(ctx, level, "result fields not passed on (not integers, bad names or too many)", "fields", r.ignored)
	}
	var out []*ludusv1.PlayerResult
	for _, p := range r.players {
		if p.slot < 0 || p.slot >= len(g.slots) || g.slots[p.slot].account == "" {
			continue
		}
		s := g.slots[p.slot]
		ticks := g.inst.Tick() - s.joinTick
		out = append(out, &ludusv1.PlayerResult{
			AccountId:  s.account,
			Score:      p.score,
			DurationMs: ticks * 1000 / int64(g.spec.TickRate),
			Stats:      p.stats,
			Place:      int32(p.place),
			Team:       int32(p.team),
		})
	}
	return out, nil
}

// Bounds of what decodeResult passes on.
const (
	maxResultBytes   = 1 << 20
	maxResultPlayers = 256
	maxResultStats   = 64   // per player (the backend's limit)
	maxStatValue     = 1e12 // |value| (the backend's MaxDelta)
	maxTeam          = 1024 // PlayerResult.team
)

// resultPlayer is one player of a module's result (docs/ABI.md, "Result").
type resultPlayer struct {
	slot, team, place int
	score             int64
	stats             map[string]int64
}

// moduleResult is what the node reads of a module's result.
type moduleResult struct {
	winner  int // slot; -1 if none
	players []resultPlayer
	ignored int // per-player fields not passed on
}

// decodeResult decodes the JSON of ludus_result generically: every integer
// per-player field other than slot and name becomes a stat (score, kills,
// deaths, xp, coins, ...), so whatever a module reports reaches the
// backend. Fields that are not integers (strings, fractions, objects),
// whose names are not stat names (^[a-z][a-z0-9_]{0,31}$), whose values
// exceed ±10^12, or beyond 64 per player are left out and counted in
// ignored. Players without an integer slot are left out. Places: the winner
// (or its team) first, then the others by score (of their team, with a
// team); equal scores share a place.
func decodeResult(raw []byte) (moduleResult, error) {
	if len(raw) > maxResultBytes {
		return moduleResult{}, fmt.Errorf("ludus_result returned %d bytes; at most %d", len(raw), maxResultBytes)
	}
	var doc struct {
		Winner  json.RawMessage              `json:"winner"`
		Players []map[string]json.RawMessage `json:"players"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return moduleResult{}, fmt.Errorf("ludus_result returned invalid JSON: %w", err)
	}
	if len(doc.Players) > maxResultPlayers {
		return moduleResult{}, fmt.Errorf("ludus_result lists %d players; at most %d", len(doc.Players), maxResultPlayers)
	}
	r := moduleResult{winner: -1}
	if w, ok := integer(doc.Winner); ok && w >= 0 && w < 1<<20 {
		r.winner = int(w)
	}
	for _, fields := range doc.Players {
		p := resultPlayer{slot: -1, stats: map[string]int64{}}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if k == "name" {
				continue
			}
			v, ok := integer(fields[k])
			switch {
			case k == "slot":
				if ok && v >= 0 && v < 1<<20 {
					p.slot = int(v)
				}
				continue
			case !ok || v > maxStatValue || v < -maxStatValue || !isStatName(k) || len(p.stats) == maxResultStats:
				r.ignored++
				continue
			}
			p.stats[k] = v
			switch k {
			case "score":
				p.score = v
			case "team":
				if v > 0 && v <= maxTeam {
					p.team = int(v)
				}
			}
		}
		if p.slot < 0 {
			r.ignored += len(fields)
			continue
		}
		r.players = append(r.players, p)
	}
	placeResult(&r)
	return r, nil
}

// integer decodes a JSON integer (a number without fraction or exponent).
func integer(raw json.RawMessage) (int64, bool) {
	var n json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&n) != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	return v, err == nil
}

func isStatName(k string) bool {
	if len(k) == 0 || len(k) > 32 || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// placeResult sets the players' places: sides are teams (team > 0) or single
// players; the winner's side is first, the others follow by their summed
// score, equal sums sharing a place (1, 2, 2, 4). A single side places
// nobody (0: nothing to rate).
func placeResult(r *moduleResult) {
	type side struct {
		score  int64
		winner bool
	}
	key := func(p resultPlayer) int {
		if p.team > 0 {
			return -p.team
		}
		return p.slot
	}
	sides := map[int]*side{}
	for _, p := range r.players {
		sd := sides[key(p)]
		if sd == nil {
			sd = &side{}
			sides[key(p)] = sd
		}
		sd.score += p.score
		if p.slot == r.winner {
			sd.winner = true
		}
	}
	if len(sides) < 2 {
		return
	}
	better := func(a, b *side) bool { return a.winner && !b.winner || a.winner == b.winner && a.score > b.score }
	for i := range r.players {
		me := sides[key(r.players[i])]
		place := 1
		for _, o := range sides {
			if better(o, me) {
				place++
			}
		}
		r.players[i].place = place
	}
}

// maybeReportProgress sends interim progress every 30 s of game time. The
// sequence is the tick, which keeps growing across failover. The report
// waits until the log is durable through that tick: the players' ticks run
// ahead of the log by up to the speculation bound, and a node that died
// before they were written would have reported progress the game resumed
// elsewhere never made (it replays the log, without the inputs that were
// lost). A report whose tick never becomes durable here (the game moved or
// the node lost it first) is not sent; the next one carries the totals.
func (g *game) maybeReportProgress(ctx context.Context) {
	every := int64(progressEvery/time.Second) * int64(g.spec.TickRate)
	if g.n.cfg.Results == nil || g.spec.MatchCredential == "" || g.inst.Tick()%every != 0 {
		return
	}
	players, err := g.resultPlayers(ctx)
	if err != nil || len(players) == 0 {
		return
	}
	seq, log := g.inst.Tick(), g.log
	go func() {
		if !g.awaitDurable(seq, progressDurableWait) {
			log.Warn("interim progress not sent: its tick was not made durable by this node; the next report carries the totals", "tick", seq)
			return
		}
		rctx, cancel := context.WithTimeout(g.n.ctx, 10*time.Second)
		defer cancel()
		if err := g.n.cfg.Results.Report(rctx, g.spec.MatchCredential, g.spec.GameID, seq, false, players); err != nil {
			log.Warn("interim progress not delivered; the next report carries the totals", "tick", seq, "err", err)
		}
	}()
}

// progressDurableWait bounds how long an interim report waits for its tick
// to be durable: far longer than a flush, as long as an etcd election.
const progressDurableWait = 30 * time.Second

// awaitDurable reports whether the game's log is durable through tick,
// waiting up to d (wall time: the writer commits in real time) while the
// node runs.
func (g *game) awaitDurable(tick int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for g.durableTick.Load() < tick {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-g.n.ctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// Final results. A match's final result is reported once the chunk that ends
// its log is durable, by the node that archives the game and before the game
// leaves etcd (archive.go): a finished game still in etcd is a result perhaps
// not delivered yet, and whichever node archives it delivers it — the result
// the node that ended the game kept, or, if that node died or forgot it, the
// result read again by replaying the log. The backend applies a match's final
// result once (the report claims the match row), so a result delivered twice
// is applied, credited and sent to the webhook once. docs/RATIONALE.md, "Why
// a final result is reported from the durable log".

// finalResult is an ended game's final result, bound to the chunk that ends
// the log it was read from.
type finalResult struct {
	seq     int64  // the final tick: the report's sequence
	logSeq  uint64 // the final chunk's sequence number
	chunk   [sha256.Size]byte
	players []*ludusv1.PlayerResult
	// err is why there is no result to report, for good: the module's result
	// is not valid, or the log does not replay.
	err error
	// replayed: read by replaying the log, not kept by the node that ended
	// the game.
	replayed  bool
	at        time.Time // when it was read, on the node's clock
	delivered atomic.Bool
}

// of reports whether r was read from the log that ends with chunk c: a log
// whose last chunk has the same sequence number and encoding. (Two runs that
// append the same last chunk to the same durable log reach the same end.)
func (r *finalResult) of(c clusterstate.LogChunk) bool {
	return c.Seq == r.logSeq && sha256.Sum256(c.Data) == r.chunk
}

// resultKeep is how long a node keeps a result it read: past it, a node that
// archives the game replays the log instead.
const resultKeep = 10 * time.Minute

// resultTable is a node's final results not yet archived, by game key.
type resultTable struct {
	mu sync.Mutex
	m  map[string]*finalResult
}

func newResultTable() *resultTable { return &resultTable{m: map[string]*finalResult{}} }

func (n *Node) results() *resultTable { return n.resultTab }

// put keeps r as the result of the game key and forgets results older than
// resultKeep.
func (t *resultTable) put(key string, r *finalResult) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, o := range t.m {
		if r.at.Sub(o.at) > resultKeep {
			delete(t.m, k)
		}
	}
	t.m[key] = r
}

func (t *resultTable) get(key string) *finalResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[key]
}

func (t *resultTable) drop(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, key)
}

// keepResult reads the result of a game that ends with chunk final and keeps
// it for deliverResult. It runs before the chunk is queued: the chunk's commit
// starts the archive, which delivers the result.
func (g *game) keepResult(ctx context.Context, final *inputlog.Chunk) {
	if g.n.cfg.Results == nil || g.spec.MatchCredential == "" {
		return
	}
	r := &finalResult{seq: g.inst.Tick(), logSeq: g.logSeq, chunk: sha256.Sum256(inputlog.Encode(nil, final)), at: g.n.cfg.Clock.Now()}
	if r.players, r.err = g.resultPlayers(ctx); r.err != nil {
		g.log.Error("cannot read the match result; none is reported", "tick", r.seq, "err", r.err)
	}
	g.n.results().put(gameKey(g.spec.TenantID, g.spec.GameID), r)
}

// deliverResult reports the final result of an ended game whose log l was read
// from etcd, unless this node delivered it before or it was refused for good.
// The result is the one this node kept, if it was read from this log; if not
// and replay is set, it is read again by replaying the log (and kept, so a
// retry does not replay it again). An error means "try again later": the game
// must stay in etcd until deliverResult returns nil.
func (n *Node) deliverResult(tenant, game string, l *clusterstate.GameLog, replay bool) error {
	if n.cfg.Results == nil || l.Status.State != clusterstate.StateEnded || l.Spec.MatchCredential == "" || len(l.Chunks) == 0 {
		return nil
	}
	key := gameKey(tenant, game)
	r := n.results().get(key)
	if r == nil || !r.of(l.Chunks[len(l.Chunks)-1]) {
		if !replay {
			return nil
		}
		var err error
		if r, err = n.replayResult(tenant, game, l); err != nil {
			return err
		}
		n.results().put(key, r)
	}
	if r.err != nil || r.delivered.Load() {
		return nil
	}
	log := n.log.With("tenant", tenant, "game", game, "tick", r.seq, "replayed", r.replayed)
	ctx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
	defer cancel()
	err := n.cfg.Results.Report(ctx, l.Spec.MatchCredential, game, r.seq, true, r.players)
	switch {
	case err == nil:
		log.Info("match result delivered", "players", len(r.players))
	case refusedForGood(err):
		log.Error("match result refused; it is not reported again", "err", err)
	default:
		return fmt.Errorf("match result not delivered: %w", err)
	}
	r.delivered.Store(true)
	return nil
}

// refusedForGood reports whether the backend refused a report in a way no
// retry changes: a credential unknown, expired or not the match's, a player
// not on the roster, a report it finds invalid, a match already ended.
func refusedForGood(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return true
	}
	return false
}

// replayResult reads an ended game's result again: it replays the log on a
// fresh instance, checking every recorded state hash, and seats the players as
// a takeover does (restore). A failure no retry mends — the module is gone or
// unusable, the log does not decode or replay, the result is not valid — is
// the result's err; other errors (the module store unreachable, the node
// stopping) are returned. The replay has no deadline of its own: it runs as
// fast as the module steps (an hour of arena with 8 bots, 126,000 ticks, in
// about a second), each call bounded by the module's call deadline.
func (n *Node) replayResult(tenant, gameID string, l *clusterstate.GameLog) (*finalResult, error) {
	ctx := n.ctx
	last := l.Chunks[len(l.Chunks)-1]
	r := &finalResult{logSeq: last.Seq, chunk: sha256.Sum256(last.Data), at: n.cfg.Clock.Now(), replayed: true}
	log := n.log.With("tenant", tenant, "game", gameID, "build", l.Spec.BuildID)
	forGood := func(err error) (*finalResult, error) {
		if ctx.Err() != nil {
			return nil, err // the node is stopping
		}
		log.Error("the match result cannot be read again from its log; none is reported", "err", err)
		r.err = err
		return r, nil
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	mod, err := n.loadModule(fctx, tenant, l.Spec.BuildID)
	cancel()
	if err != nil {
		if !moduleGone(err) {
			return nil, err
		}
		return forGood(fmt.Errorf("module build %.12s: %w", l.Spec.BuildID, err))
	}
	chunks, _, err := decodeChunks(l.Chunks)
	if err != nil {
		return forGood(err)
	}
	start := time.Now()
	inst, _, err := ReplayModule(ctx, mod, l.Spec, chunks)
	if err != nil {
		return forGood(err)
	}
	defer inst.Close(context.Background())
	// A game that never runs: the slots and the instance resultPlayers reads.
	g := &game{n: n, spec: l.Spec, inst: inst, log: log, accounts: map[string]int{}, slots: make([]*slot, l.Spec.MaxPlayers)}
	for i := range g.slots {
		g.slots[i] = &slot{}
	}
	g.restore(chunks)
	r.seq = inst.Tick()
	if r.players, err = g.resultPlayers(ctx); err != nil {
		return forGood(err)
	}
	log.Info("match result read again by replaying its log", "tick", r.seq, "players", len(r.players), "replay_ms", time.Since(start).Milliseconds())
	return r, nil
}
