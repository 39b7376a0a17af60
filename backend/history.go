package backend

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// A player's match history (ProgressionService.ListMyMatches), and the
// display names that lists shown to people carry beside account ids
// (history, leaderboards).

const (
	// DefaultMyMatches and MaxMyMatches bound ListMyMatches (limit 0 and the
	// most; the proto's rule says the same).
	DefaultMyMatches = 20
	MaxMyMatches     = 50
	// MaxOthersShown is how many other players a history entry names: a
	// match may have up to MaxPlayers, and each named player costs a name
	// lookup, so 50 matches cost at most 50 × 16 lookups.
	MaxOthersShown = 16
)

// ListMyMatches returns the caller's finished matches, newest first. The
// store answers by (tenant, account) from the caller's ticket, so another
// account's or another tenant's matches cannot be asked for. There is no
// cursor (the store lists the newest matches only): limit is all there is.
func (s *progressionService) ListMyMatches(ctx context.Context, req *connect.Request[ludusv1.ListMyMatchesRequest]) (*connect.Response[ludusv1.ListMyMatchesResponse], error) {
	c, err := s.player(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := validateMsg(req.Msg); err != nil {
		return nil, err
	}
	rs, err := s.store.ListMatchResults(ctx, c.TenantID, c.AccountID, limitOf(req.Msg.Limit, DefaultMyMatches, MaxMyMatches))
	if err != nil {
		return nil, s.internal(ctx, "list my matches", err)
	}
	names := s.names(c.TenantID)
	out := &ludusv1.ListMyMatchesResponse{Matches: make([]*ludusv1.MyMatch, 0, len(rs))}
	for _, r := range rs {
		m, err := myMatch(ctx, matchResultProto(r), c.AccountID, names)
		if err != nil {
			return nil, err
		}
		if m != nil {
			out.Matches = append(out.Matches, m)
		}
	}
	return connect.NewResponse(out), nil
}

// myMatch is a stored result as one of its players sees it; nil if the
// account is not among its players (the store lists only matches the
// account played, so this does not happen).
func myMatch(ctx context.Context, r *ludusv1.MatchResult, accountID string, names *names) (*ludusv1.MyMatch, error) {
	var you *ludusv1.PlayerResult
	var others []*ludusv1.PlayerResult
	var longest int64
	for _, p := range r.Players {
		longest = max(longest, p.DurationMs)
		if p.AccountId == accountID {
			you = p
		} else {
			others = append(others, p)
		}
	}
	if you == nil {
		return nil, nil
	}
	// Best place first (0, unknown, last), then by score.
	slices.SortFunc(others, func(a, b *ludusv1.PlayerResult) int {
		if c := cmp.Compare(placeKey(a.Place), placeKey(b.Place)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.AccountId, b.AccountId)
	})
	m := &ludusv1.MyMatch{MatchId: r.MatchId, Game: r.Game, EndedAt: r.EndedAt, DurationMs: longest, You: you,
		Outcome: outcome(you, others), OthersTotal: int32(len(others))}
	for _, p := range others[:min(len(others), MaxOthersShown)] {
		name, err := names.of(ctx, p.AccountId)
		if err != nil {
			return nil, err
		}
		m.Others = append(m.Others, &ludusv1.OtherPlayer{AccountId: p.AccountId, DisplayName: name, Score: p.Score, Place: p.Place, Team: p.Team})
	}
	return m, nil
}

func placeKey(place int32) int32 {
	if place <= 0 {
		return 1 << 30
	}
	return place
}

// outcome reads a player's place: first alone is won, first with another
// side is a draw, behind is lost. Only reported players are seen: a draw with
// a bot (bots are not reported) reads as won.
func outcome(you *ludusv1.PlayerResult, others []*ludusv1.PlayerResult) ludusv1.MatchOutcome {
	switch {
	case you.Place <= 0:
		return ludusv1.MatchOutcome_MATCH_OUTCOME_UNSPECIFIED
	case you.Place > 1:
		return ludusv1.MatchOutcome_MATCH_OUTCOME_LOST
	}
	for _, p := range others {
		if p.Place == 1 && (you.Team == 0 || p.Team != you.Team) {
			return ludusv1.MatchOutcome_MATCH_OUTCOME_DRAW
		}
	}
	return ludusv1.MatchOutcome_MATCH_OUTCOME_WON
}

// validateMsg checks a request against its proto's buf.validate rules:
// InvalidArgument naming the field.
func validateMsg(msg proto.Message) error {
	err := protovalidate.Validate(msg)
	var verr *protovalidate.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &verr):
		return invalidArg(err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// names looks display names up for one call, each account once.
type names struct {
	s        *Server
	tenantID string
	m        map[string]string
}

func (s *Server) names(tenantID string) *names {
	return &names{s: s, tenantID: tenantID, m: map[string]string{}}
}

// of returns an account's display name; for an account without one (or
// deleted between the list and this lookup), the guest form the account
// would have been given at sign-in.
func (n *names) of(ctx context.Context, accountID string) (string, error) {
	if name, ok := n.m[accountID]; ok {
		return name, nil
	}
	a, err := n.s.store.AccountByID(ctx, n.tenantID, accountID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", n.s.internal(ctx, "account name", err)
	}
	name := a.DisplayName
	if name == "" {
		name = guestName(accountID)
	}
	n.m[accountID] = name
	return name, nil
}

// nameEntries fills in the display names of leaderboard entries (at most
// 100, one lookup each).
func (s *Server) nameEntries(ctx context.Context, tenantID string, es []*ludusv1.LeaderboardEntry) error {
	names := s.names(tenantID)
	for _, e := range es {
		name, err := names.of(ctx, e.AccountId)
		if err != nil {
			return err
		}
		e.DisplayName = name
	}
	return nil
}
