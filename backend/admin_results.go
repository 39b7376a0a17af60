package backend

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Match results and leaderboards (AdminService).

func matchResultProto(r store.MatchResult) *ludusv1.MatchResult {
	out := &ludusv1.MatchResult{MatchId: r.MatchID, Game: r.Game, EndedAt: timestamppb.New(r.EndedAt)}
	for _, p := range r.Players {
		out.Players = append(out.Players, &ludusv1.PlayerResult{AccountId: p.AccountID, Score: p.Score, DurationMs: p.DurationMs,
			Damage: p.Damage, ItemsUsed: p.ItemsUsed, Xp: p.XP, Currency: p.Currency, Items: p.Items, Stats: p.Stats,
			Place: int32(p.Place), Team: int32(p.Team)})
	}
	return out
}

// ListMatchResults lists the tenant's final match results.
func (s *adminService) ListMatchResults(ctx context.Context, req *connect.Request[ludusv1.ListMatchResultsRequest]) (*connect.Response[ludusv1.ListMatchResultsResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListMatchResults", needRead)
	if err != nil {
		return nil, err
	}
	if req.Msg.AccountId != "" {
		if _, err := s.account(ctx, tenantID, req.Msg.AccountId); err != nil {
			return nil, err
		}
	}
	rs, err := s.store.ListMatchResults(ctx, tenantID, req.Msg.AccountId, limitOf(req.Msg.Limit, 20, 200))
	if err != nil {
		return nil, s.internal(ctx, "list match results", err)
	}
	out := &ludusv1.ListMatchResultsResponse{}
	for _, r := range rs {
		out.Results = append(out.Results, matchResultProto(r))
	}
	return connect.NewResponse(out), nil
}

// GetAdminLeaderboard reads a game's leaderboard.
func (s *adminService) GetAdminLeaderboard(ctx context.Context, req *connect.Request[ludusv1.GetAdminLeaderboardRequest]) (*connect.Response[ludusv1.GetAdminLeaderboardResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetAdminLeaderboard", needRead)
	if err != nil {
		return nil, err
	}
	if req.Msg.AroundAccountId != "" {
		if _, err := s.account(ctx, tenantID, req.Msg.AroundAccountId); err != nil {
			return nil, err
		}
	}
	es, err := s.leaderboard(ctx, tenantID, req.Msg.Query, req.Msg.AroundAccountId)
	if err != nil {
		return nil, err
	}
	if err := s.nameEntries(ctx, tenantID, es); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GetAdminLeaderboardResponse{Entries: es}), nil
}

// leaderboard answers a leaderboard query: the top, or around an account.
func (s *Server) leaderboard(ctx context.Context, tenantID string, q *ludusv1.LeaderboardRequest, around string) ([]*ludusv1.LeaderboardEntry, error) {
	if q == nil {
		return nil, invalidArg(errors.New("query is required"))
	}
	if err := checkModuleName(q.Game); err != nil {
		return nil, invalidArg(fmt.Errorf("game: %w", err))
	}
	board := q.Game
	if q.Stat != "" {
		if !statName.MatchString(q.Stat) {
			return nil, invalidArg(fmt.Errorf("stat must match %s, got %q", statName, clip(q.Stat)))
		}
		board = boardKey(q.Game, q.Stat)
	}
	byBest := q.Order != ludusv1.LeaderboardOrder_LEADERBOARD_ORDER_SUM
	limit := limitOf(q.Limit, 10, 100)
	offset := 0
	if around != "" {
		e, err := s.store.LeaderboardRank(ctx, tenantID, board, byBest, around)
		if errors.Is(err, store.ErrNotFound) {
			return nil, connect.NewError(connect.CodeNotFound, errors.New("the account has no result in this game yet"))
		} else if err != nil {
			return nil, s.internal(ctx, "leaderboard rank", err)
		}
		offset = max(0, int(e.Rank)-1-limit/2)
	}
	es, err := s.store.Leaderboard(ctx, tenantID, board, byBest, offset, limit)
	if err != nil {
		return nil, s.internal(ctx, "leaderboard", err)
	}
	out := make([]*ludusv1.LeaderboardEntry, 0, len(es))
	for _, e := range es {
		out = append(out, &ludusv1.LeaderboardEntry{Rank: e.Rank, AccountId: e.AccountID, Best: e.Best, Sum: e.Sum, Matches: e.Matches})
	}
	return out, nil
}
