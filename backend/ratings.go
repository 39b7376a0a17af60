package backend

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ratings"
)

// Ratings: a final result rates its players (Glicko-2, package ratings), per
// tenant, game mode and account, in the transaction that stores the result.

// ratingSystem is the Glicko-2 system of every tenant (Tau 0.5, RD ≤ 350).
var ratingSystem ratings.System

// ratingUpdate returns the rating update of a final report in mode, or nil
// if the report does not say who beat whom: a player without a place, or
// fewer than two sides. A side is a team (PlayerReport.Team > 0) or a player
// without a team.
func ratingUpdate(mode string, players []store.PlayerReport) *store.RatingUpdate {
	side := make(map[string]string, len(players)) // account -> side key
	place := map[string]int{}                     // side key -> best place
	for _, p := range players {
		if p.Place <= 0 {
			return nil
		}
		k := "p:" + p.AccountID
		if p.Team > 0 {
			k = fmt.Sprintf("t:%d", p.Team)
		}
		side[p.AccountID] = k
		if q, ok := place[k]; !ok || p.Place < q {
			place[k] = p.Place
		}
	}
	if len(place) < 2 {
		return nil
	}
	return &store.RatingUpdate{Mode: mode, Rate: func(before []store.Rating) ([]store.Rating, error) {
		return rate(before, side, place)
	}}
}

func publicRating(r store.Rating) ratings.Rating {
	if r.Matches == 0 {
		return ratings.New()
	}
	return ratings.Rating{Rating: r.Rating, RD: r.RD, Volatility: r.Volatility}
}

// rate computes the new ratings of before's players (the players of a match
// whose accounts exist) from their sides and the sides' places.
func rate(before []store.Rating, side map[string]string, place map[string]int) ([]store.Rating, error) {
	var teams []ratings.Team
	at := map[string]int{} // side key -> index in teams
	where := make([][2]int, len(before))
	for i, b := range before {
		k := side[b.AccountID]
		t, ok := at[k]
		if !ok {
			t = len(teams)
			at[k] = t
			teams = append(teams, ratings.Team{Place: place[k]})
		}
		where[i] = [2]int{t, len(teams[t].Players)}
		teams[t].Players = append(teams[t].Players, publicRating(b))
	}
	out := make([]store.Rating, len(before))
	if len(teams) < 2 { // the other side's accounts are gone: nothing to rate against
		for i, b := range before {
			r := publicRating(b)
			out[i] = store.Rating{Rating: r.Rating, RD: r.RD, Volatility: r.Volatility}
		}
		return out, nil
	}
	after, err := ratingSystem.UpdateMatch(teams)
	if err != nil {
		return nil, err
	}
	for i := range before {
		r := after[where[i][0]][where[i][1]]
		out[i] = store.Rating{Rating: r.Rating, RD: r.RD, Volatility: r.Volatility}
	}
	return out, nil
}

// GetRating returns an account's rating in a mode.
func (s *adminService) GetRating(ctx context.Context, req *connect.Request[ludusv1.GetRatingRequest]) (*connect.Response[ludusv1.GetRatingResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetRating", needRead)
	if err != nil {
		return nil, err
	}
	if err := checkModuleName(req.Msg.Mode); err != nil {
		return nil, invalidArg(fmt.Errorf("mode: %w", err))
	}
	a, err := s.account(ctx, tenantID, req.Msg.AccountId)
	if err != nil {
		return nil, err
	}
	rs, err := s.store.Ratings(ctx, tenantID, req.Msg.Mode, []string{a.ID})
	if err != nil {
		return nil, s.internal(ctx, "ratings", err)
	}
	r, ok := rs[a.ID]
	out := &ludusv1.Rating{Mode: req.Msg.Mode, AccountId: a.ID}
	p := publicRating(r)
	out.Rating, out.Rd, out.Volatility, out.Matches = p.Rating, p.RD, p.Volatility, r.Matches
	if ok && !r.UpdatedAt.IsZero() {
		out.UpdatedAt = timestamppb.New(r.UpdatedAt)
	}
	return connect.NewResponse(&ludusv1.GetRatingResponse{Rating: out}), nil
}
