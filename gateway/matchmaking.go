package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/matchmaker"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/ratings"
)

// matchAllocator turns a match the matchmaker found into a running game, in
// one step: the tenant's quotas (admission.go), the mode's module (a mode
// names the module it plays), a node of the match's region chosen by the
// fleet's rendezvous ranking (with a warm instance of the build when the node
// has one), the match credential and the roster of every human seat (so the
// result credits exactly them), written only once there is a node to try.
type matchAllocator struct{ s *gameService }

// Allocate implements matchmaker.Allocator. Its errors say why the match did
// not start; a quota's refusal (ResourceExhausted, naming the quota) and a
// refusal of the game itself (a node's, which every node would repeat) wrap
// the *connect.Error a player could be shown (no node named).
func (a matchAllocator) Allocate(ctx context.Context, tenant, mode, region string, seats [][]matchmaker.Seat) (matchmaker.Allocation, error) {
	s := a.s
	gameID := newGameID()
	// The tenant's quotas, as for CreateGame and before anything is minted or
	// placed: a matched game is a new game like any other. No account's
	// games_per_minute is charged: no player asked for this game, and each
	// one's searches have their own rate.
	done, err := s.g.admit(ctx, tenant, "", gameID)
	if err != nil {
		return matchmaker.Allocation{}, fmt.Errorf("no game for the match: %w", err)
	}
	outcome := gameNotStarted
	defer func() { done(outcome) }()
	mod, err := s.g.modules.ResolveModule(ctx, connect.NewRequest(&clusterv1.ResolveModuleRequest{TenantId: tenant, Name: mode}))
	if err != nil {
		return matchmaker.Allocation{}, fmt.Errorf("mode %q plays the module of that name: %w", mode, err)
	}
	var accounts []string
	bots := 0
	for _, team := range seats {
		for _, seat := range team {
			if seat.Bot || seat.AccountID == "" {
				bots++
				continue
			}
			accounts = append(accounts, seat.AccountID)
		}
	}
	var config []byte
	if bots > 0 {
		if config, err = withBots(nil, int32(bots)); err != nil {
			return matchmaker.Allocation{}, err
		}
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return matchmaker.Allocation{}, err
	}
	// Only nodes of the match's region: its players measured their RTT to it.
	inRegion := nodes[:0:0]
	for _, n := range nodes {
		if n.Region == region {
			n.Games += s.g.recentPlacements(n.ID)
			inRegion = append(inRegion, n)
		}
	}
	ranked := fleet.Rank(inRegion, gameID, fleet.RankOptions{})
	if len(ranked) == 0 {
		return matchmaker.Allocation{}, fmt.Errorf("no sim node of region %q can take the match", region)
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	start := &clusterv1.StartGameRequest{
		TenantId: tenant, GameId: gameID, ModuleName: mode,
		BuildId: mod.Msg.Module.BuildId, Seed: binary.LittleEndian.Uint64(seed[:]), Config: config,
		// Only the matched players may take its seats: the game is listed
		// in the lobby like any other, and a ranked match credits whoever
		// plays in it.
		ReservedAccounts: accounts,
	}
	cred, err := s.g.modules.MintMatchCredential(ctx, connect.NewRequest(&clusterv1.MintMatchCredentialRequest{
		TenantId: tenant, MatchId: start.GameId, Game: mode}))
	if err != nil {
		return matchmaker.Allocation{}, fmt.Errorf("mint match credential: %w", err)
	}
	start.MatchCredential = cred.Msg.Credential
	if len(accounts) > 0 {
		if _, err := s.g.modules.AddMatchPlayers(ctx, connect.NewRequest(&clusterv1.AddMatchPlayersRequest{
			TenantId: tenant, MatchId: start.GameId, AccountIds: accounts})); err != nil {
			return matchmaker.Allocation{}, fmt.Errorf("register the match's roster: %w", err)
		}
	}
	g, o, err := s.startGame(ctx, ranked, start)
	outcome = o
	switch {
	case err == nil:
		s.g.log.Info("match allocated", "tenant", tenant, "game", start.GameId, "mode", mode, "region", region, "node", g.node, "players", len(accounts), "bots", bots)
		return matchmaker.Allocation{GameID: start.GameId, NodeID: g.node, Region: region}, nil
	case finalStartRefusal(err):
		return matchmaker.Allocation{}, fmt.Errorf("the match's game was refused: %w", startRefusalError(err))
	case ctx.Err() != nil:
		return matchmaker.Allocation{}, ctx.Err()
	}
	return matchmaker.Allocation{}, fmt.Errorf("no sim node of region %q can take the match", region)
}

// startMatchmaking makes this gateway a matchmaker replica: it serves
// MatchmakingService to players (tickets as for GameService) and takes its
// turn leading queues. Replicas are stateless; any number may run.
func (g *Gateway) startMatchmaking(state *clusterstate.Client) (*matchmaker.Matchmaker, error) {
	mm, err := matchmaker.New(matchmaker.Config{State: state, Allocator: matchAllocator{s: &gameService{g: g}},
		Ratings: backendRatings{g: g}, Log: g.log.With("component", "matchmaker")})
	if err != nil {
		return nil, fmt.Errorf("gateway: start matchmaking: %w", err)
	}
	return mm, nil
}

// matchmakingHandler serves MatchmakingService behind the player's ticket.
func (g *Gateway) matchmakingHandler(mm *matchmaker.Matchmaker) (string, http.Handler) {
	svc := matchmaker.NewService(mm, func(ctx context.Context) (matchmaker.Caller, error) {
		c := claimsFrom(ctx)
		if c == nil {
			return matchmaker.Caller{}, errors.New("no session ticket")
		}
		return matchmaker.Caller{TenantID: c.TenantID, AccountID: c.AccountID}, nil
	})
	// Without the gateway's validator: the service validates each request
	// itself (matchmaker.Find, CreateParty), first thing, and a second pass
	// of protovalidate cost every search as much again (its CEL rules over
	// the RTT map were 3 % of all CPU, etcd's included, in a saturation
	// profile of ludus bench matchmaking).
	path, h := ludusv1connect.NewMatchmakingServiceHandler(svc,
		connect.WithInterceptors(&ticketInterceptor{v: g.cfg.Verifier}, accountRate{l: g.searches, refused: g.metrics.limitRejected}),
		connect.WithReadMaxBytes(g.limits.MaxMessageBytes))
	return path, limitBodies(h, int64(g.limits.MaxMessageBytes)+bodySlack)
}

// backendRatings reads a player's rating in a mode from the backend, which
// updates it from every rated match's result (ModuleStoreService.GetRatings).
type backendRatings struct{ g *Gateway }

// Rating implements matchmaker.RatingSource; a player never rated is new.
func (r backendRatings) Rating(ctx context.Context, tenant, mode, account string) (ratings.Rating, error) {
	resp, err := r.g.modules.GetRatings(ctx, connect.NewRequest(&clusterv1.GetRatingsRequest{
		TenantId: tenant, Mode: mode, AccountIds: []string{account}}))
	if err != nil {
		return ratings.Rating{}, fmt.Errorf("rating of %s in %q: %w", account, mode, err)
	}
	for _, p := range resp.Msg.Ratings {
		if p.AccountId == account {
			return ratings.Rating{Rating: p.Rating, RD: p.Rd, Volatility: p.Volatility}, nil
		}
	}
	return ratings.New(), nil
}

// accountRate refuses a call over its account's token bucket (the ticket
// interceptor, before it, has put the caller's claims in the context).
type accountRate struct {
	l       *accountLimiter
	refused *prometheus.CounterVec // by tenant and limit ("matchmaking_rate")
}

func (r accountRate) allow(ctx context.Context) error {
	c := claimsFrom(ctx)
	if c == nil {
		return nil // the service refuses the call (Unauthenticated)
	}
	if err := r.l.allow(c.AccountID); err != nil {
		r.refused.WithLabelValues(c.TenantID, "matchmaking_rate").Inc()
		return err
	}
	return nil
}

func (r accountRate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := r.allow(ctx); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (r accountRate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (r accountRate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := r.allow(ctx); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
