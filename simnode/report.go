package simnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// ResultReporter delivers a match's interim progress and final result to the
// backend with the match's own credential (lesson 3 of the brief: the
// simulation never holds database credentials).
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
		g.log.Debug("result fields not passed on (not integers, bad names or too many)", "fields", r.ignored)
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
// sequence is the tick, which keeps growing across failover.
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
		rctx, cancel := context.WithTimeout(g.n.ctx, 10*time.Second)
		defer cancel()
		if err := g.n.cfg.Results.Report(rctx, g.spec.MatchCredential, g.spec.GameID, seq, false, players); err != nil {
			log.Warn("interim progress not delivered; the next report carries the totals", "tick", seq, "err", err)
		}
	}()
}

// reportFinal delivers the final result, retrying with backoff for up to two
// minutes: it is applied exactly once however often it arrives.
func (g *game) reportFinal(ctx context.Context) {
	if g.n.cfg.Results == nil || g.spec.MatchCredential == "" {
		return
	}
	players, err := g.resultPlayers(ctx)
	if err != nil {
		g.log.Error("cannot read the match result", "tick", g.inst.Tick(), "err", err)
		return
	}
	seq, log := g.inst.Tick(), g.log
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		delay := 200 * time.Millisecond
		for {
			err := g.n.cfg.Results.Report(rctx, g.spec.MatchCredential, g.spec.GameID, seq, true, players)
			if err == nil {
				log.Info("match result delivered", "tick", seq, "players", len(players))
				return
			}
			if c := connect.CodeOf(err); c == connect.CodePermissionDenied || c == connect.CodeInvalidArgument || c == connect.CodeFailedPrecondition {
				log.Error("match result refused", "tick", seq, "err", err)
				return
			}
			select {
			case <-rctx.Done():
				log.Error("match result not delivered", "tick", seq, "err", err)
				return
			case <-time.After(delay):
			}
			delay = min(delay*2, 10*time.Second)
		}
	}()
}
