package gateway

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Starting a new game on a node: CreateGame and the matchmaker's allocator
// both rank the nodes, then call startGame, which decides what a node's
// answer means (here and nowhere else).

// startedGame is where a new game started.
type startedGame struct {
	node string // the node that claimed it; "" if etcd could not say
	info *ludusv1.GameInfo
}

// errNoNodeStarted: every node of the ranking refused the game (full,
// draining) or could not be reached.
var errNoNodeStarted = errors.New("no sim node started the game")

// finalStartRefusal reports whether a node's refusal to start a new game is
// one every node would give, so no other node is asked: the game's own
// (InvalidArgument: its configuration, bots for a module that takes none),
// its module's (FailedPrecondition: it does not compile or instantiate), or
// its build missing from the module store every node fetches it from
// (NotFound: StartGame answers it for nothing else).
func finalStartRefusal(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeNotFound:
		return true
	}
	return false
}

// startRefusalError is what the caller of CreateGame (or the matchmaker) gets
// of a final refusal: the node's code, message and details, which say what to
// change and name no node; never its transport error.
func startRefusalError(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return connect.NewError(connect.CodeUnknown, errors.New("the game could not be started"))
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}

// mayHaveStarted reports whether a StartGame that failed may have claimed the
// game all the same: a node claims the game in etcd before it answers, so a
// call given up (timed out, cancelled) or broken off, or an Unavailable
// (also what a failed claim transaction, maybe committed, gives), leaves it
// unknown. A refusal (the node full, the game's own fault) started nothing.
func mayHaveStarted(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeNotFound,
		connect.CodeResourceExhausted, connect.CodeDataLoss, connect.CodePermissionDenied,
		connect.CodeUnauthenticated, connect.CodeUnimplemented, connect.CodeOutOfRange:
		return false
	}
	return true
}

// startGame starts a new game on the first node of ranked that takes it,
// trying one node at a time (nodeCallTimeout each: a frozen node must not
// hold the caller). It returns where the game started, or how its placement
// ended (for its admission) and why: a final refusal (finalStartRefusal; the
// node's error), the caller's context error, or errNoNodeStarted.
//
// A node call given up or broken off may have claimed the game all the same.
// The next node then answers AlreadyExists: for a game id just drawn at
// random that can only be the earlier call's claim, so the game started
// there. When no later node answers so, etcd says whether it was claimed.
// Either way the game is reported started, on the node etcd names.
func (s *gameService) startGame(ctx context.Context, ranked []clusterstate.NodeInfo, start *clusterv1.StartGameRequest) (startedGame, startOutcome, error) {
	maybe := false
	for _, n := range ranked {
		nctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
		resp, err := s.g.node(n).StartGame(nctx, connect.NewRequest(start))
		cancel()
		if err == nil {
			s.g.placed(n.ID)
			return startedGame{node: n.ID, info: resp.Msg.Game}, gameStarted, nil
		}
		s.g.log.Warn("a node could not start a game", "node", n.ID, "tenant", start.TenantId, "game", start.GameId, "err", err)
		switch {
		case connect.CodeOf(err) == connect.CodeAlreadyExists:
			g, ok := s.claimedGame(ctx, start)
			if !ok {
				// Started, where etcd could not say: the game id is all a
				// player needs (a join finds the owner).
				g = startedGame{info: &ludusv1.GameInfo{GameId: start.GameId, ModuleName: start.ModuleName, BuildId: start.BuildId}}
			}
			s.g.log.Info("an earlier node call started the game after all", "tenant", start.TenantId, "game", start.GameId, "node", g.node)
			if g.node != "" {
				s.g.placed(g.node)
			}
			return g, gameStarted, nil
		case finalStartRefusal(err):
			if maybe {
				return startedGame{}, gameMaybeStarted, err
			}
			return startedGame{}, gameNotStarted, err
		case mayHaveStarted(err):
			maybe = true
		}
		if ctx.Err() != nil {
			break
		}
	}
	if !maybe {
		if ctx.Err() != nil {
			return startedGame{}, gameNotStarted, ctx.Err()
		}
		return startedGame{}, gameNotStarted, errNoNodeStarted
	}
	if ctx.Err() != nil {
		return startedGame{}, gameMaybeStarted, ctx.Err()
	}
	if g, ok := s.claimedGame(ctx, start); ok {
		s.g.log.Info("a node call that failed started the game after all", "tenant", start.TenantId, "game", start.GameId, "node", g.node)
		if g.node != "" {
			s.g.placed(g.node)
		}
		return g, gameStarted, nil
	}
	return startedGame{}, gameMaybeStarted, errNoNodeStarted
}

// claimedGame reads the game start names from etcd: whether a node claimed it
// (its spec is written in the claim's transaction), and which.
func (s *gameService) claimedGame(ctx context.Context, start *clusterv1.StartGameRequest) (startedGame, bool) {
	ctx, cancel := context.WithTimeout(ctx, nodeCallTimeout)
	defer cancel()
	s.g.metrics.etcdReads.Inc()
	g, err := s.g.fleet.Game(ctx, start.TenantId, start.GameId)
	if err != nil {
		if !errors.Is(err, clusterstate.ErrGameNotFound) {
			s.g.log.Warn("cannot read whether a node claimed a game", "tenant", start.TenantId, "game", start.GameId, "err", err)
		}
		return startedGame{}, false
	}
	return startedGame{node: g.Owner, info: lobbyInfo(g)}, true
}
