package simnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/sdk/abi"
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
// accounts that hold them (bots have no account and are not reported).
func (g *game) resultPlayers(ctx context.Context) ([]*ludusv1.PlayerResult, error) {
	raw, err := g.inst.Result(ctx)
	if err != nil {
		return nil, err
	}
	var r abi.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("ludus_result returned invalid JSON: %w", err)
	}
	var out []*ludusv1.PlayerResult
	for _, p := range r.Players {
		if p.Slot < 0 || p.Slot >= len(g.slots) || g.slots[p.Slot].account == "" {
			continue
		}
		s := g.slots[p.Slot]
		ticks := g.inst.Tick() - s.joinTick
		out = append(out, &ludusv1.PlayerResult{
			AccountId:  s.account,
			Score:      p.Score,
			DurationMs: ticks * 1000 / int64(g.spec.TickRate),
		})
	}
	return out, nil
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
