package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/gateway/framecodec"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/fleet"
)

// gameService implements ludusv1connect.GameServiceHandler.
type gameService struct{ g *Gateway }

func newGameID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func (s *gameService) CreateGame(ctx context.Context, req *connect.Request[ludusv1.CreateGameRequest]) (*connect.Response[ludusv1.CreateGameResponse], error) {
	c := claimsFrom(ctx)
	gameID := newGameID()
	done, err := s.g.admit(ctx, c.TenantID, c.AccountID, gameID) // tenant quotas (admission.go)
	if err != nil {
		return nil, err
	}
	// Until a node answers, the game counts against the tenant's live games
	// on this gateway (etcd lists it only once its node claims it).
	outcome := gameNotStarted
	defer func() { done(outcome) }()
	if err := s.g.creations.allow(c.AccountID); err != nil {
		s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "game_rate").Inc()
		return nil, err
	}
	m := req.Msg
	if m.ModuleName == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("module_name is required (e.g. \"arena\")"))
	}
	if max := s.g.limits.MaxConfigBytes; len(m.Config) > max {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("config is %d bytes; the limit is %d", len(m.Config), max))
	}
	mod, err := s.g.modules.ResolveModule(ctx, connect.NewRequest(&clusterv1.ResolveModuleRequest{TenantId: c.TenantID, Name: m.ModuleName}))
	if err != nil {
		return nil, s.backendError("resolve module", err)
	}
	maxPlayers := mod.Msg.Module.MaxPlayers
	if m.Bots < 0 || m.Bots >= maxPlayers {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("bots must be between 0 and %d for %s (max %d players)", maxPlayers-1, m.ModuleName, maxPlayers))
	}
	// The config is the module's own business (docs/ABI.md): it passes through
	// untouched unless bots are asked for, which only modules declaring
	// "bots": true take (the node checks), as a "bots" count in a JSON object.
	config := m.Config
	if m.Bots > 0 {
		var err error
		if config, err = withBots(m.Config, m.Bots); err != nil {
			return nil, err
		}
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return nil, err
	}
	// Node records are republished about once a second; count this gateway's own
	// recent placements too, so a burst of creates spreads out.
	for i := range nodes {
		nodes[i].Games += s.g.recentPlacements(nodes[i].ID)
	}
	// Nodes of this gateway's region first (its players are near it), the
	// others only when none of them has room.
	ranked := fleet.Rank(nodes, gameID, fleet.RankOptions{Region: s.g.cfg.Region})
	if len(ranked) == 0 {
		return nil, noNodeError()
	}
	var seedBytes [8]byte
	_, _ = rand.Read(seedBytes[:])
	start := &clusterv1.StartGameRequest{
		TenantId: c.TenantID, GameId: gameID, ModuleName: m.ModuleName,
		BuildId: mod.Msg.Module.BuildId, Seed: binary.LittleEndian.Uint64(seedBytes[:]), Config: config, HostName: playerName(c),
	}
	// The backend registers the match and mints the credential the sim node
	// reports its result with; the node never holds database credentials.
	cred, err := s.g.modules.MintMatchCredential(ctx, connect.NewRequest(&clusterv1.MintMatchCredentialRequest{
		TenantId: c.TenantID, MatchId: start.GameId, Game: m.ModuleName}))
	if err != nil {
		return nil, s.backendError("mint match credential", err)
	}
	start.MatchCredential = cred.Msg.Credential
	g, o, err := s.startGame(ctx, ranked, start)
	outcome = o
	switch {
	case err == nil:
		s.g.log.Info("game created", "tenant", c.TenantID, "game", start.GameId, "node", g.node, "build", start.BuildId, "account", c.AccountID)
		return connect.NewResponse(&ludusv1.CreateGameResponse{Game: g.info}), nil
	case finalStartRefusal(err):
		return nil, startRefusalError(err)
	case ctx.Err() != nil:
		return nil, connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
	}
	return nil, noNodeError()
}

// noNodeError is CreateGame's answer when no node can take the game (a new
// error each time: a handler's error carries its own metadata).
func noNodeError() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("no sim node can take a new game right now; retry in a moment"))
}

// backendError is what a player sees of a failed backend call: refusals about
// the request keep their message, anything else (the backend down, a
// transport error with its address) is a plain Unavailable.
func (s *gameService) backendError(op string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition,
		connect.CodePermissionDenied, connect.CodeResourceExhausted, connect.CodeUnauthenticated:
		var ce *connect.Error
		if errors.As(err, &ce) {
			return connect.NewError(ce.Code(), errors.New(ce.Message()))
		}
	}
	s.g.log.Warn("backend call failed", "op", op, "err", err)
	return connect.NewError(connect.CodeUnavailable, errors.New("the backend cannot be reached right now; retry in a moment"))
}

// withBots sets "bots" in the module config, which must then be a JSON object
// if given.
func withBots(config []byte, bots int32) ([]byte, error) {
	obj := map[string]any{}
	if len(config) > 0 {
		if err := json.Unmarshal(config, &obj); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("with bots, the config must be a JSON object (the bots count is set in it): %v", err))
		}
	}
	obj["bots"] = bots
	return json.Marshal(obj)
}

// nodes returns every sim node's record (Gateway.Nodes), or Unavailable.
func (s *gameService) nodes(ctx context.Context) ([]clusterstate.NodeInfo, error) {
	nodes, err := s.g.Nodes(ctx)
	if err != nil {
		s.g.log.Warn("cannot read the fleet", "err", err)
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the fleet cannot be read right now; retry in a moment"))
	}
	return nodes, nil
}

// Nodes returns every sim node's record: from the gateway's watched
// directory, or read from etcd while the directory is not current. Callers
// that ask often (placement, the autoscale webhook and its gauge) cost etcd
// nothing in the steady state.
func (g *Gateway) Nodes(ctx context.Context) ([]clusterstate.NodeInfo, error) {
	if nodes, ok := g.dir.nodeList(); ok {
		return nodes, nil
	}
	g.metrics.etcdReads.Inc()
	return g.fleet.Nodes(ctx)
}

func (s *gameService) ListGames(ctx context.Context, req *connect.Request[ludusv1.ListGamesRequest]) (*connect.Response[ludusv1.ListGamesResponse], error) {
	c := claimsFrom(ctx)
	games, err := s.g.lobby.games(ctx, c.TenantID) // shared with concurrent calls (lobby.go)
	if err != nil {
		if ctx.Err() != nil {
			return nil, connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
		}
		s.g.log.Warn("cannot list games", "tenant", c.TenantID, "err", err)
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("games cannot be listed right now; retry in a moment"))
	}
	resp := &ludusv1.ListGamesResponse{}
	for _, g := range games { // newest first
		if g.Status.State == clusterstate.StateRunning && g.Owner != "" {
			if len(resp.Games) == MaxListedGames {
				break
			}
			resp.Games = append(resp.Games, lobbyInfo(g))
		}
	}
	return connect.NewResponse(resp), nil
}

// lobbyInfo is a game as the lobby lists it: players counts humans, bots the
// seats the module's bots hold, with who created the game and when (from the
// spec its node wrote).
func lobbyInfo(g clusterstate.Game) *ludusv1.GameInfo {
	info := fleet.GameInfo(g)
	info.Bots, info.HostName = int32(g.Spec.Bots), g.Spec.HostName
	if !g.Spec.CreatedAt.IsZero() {
		info.CreatedAtUnixMs = g.Spec.CreatedAt.UnixMilli()
	}
	return info
}

// owner finds the node running a game of the caller's tenant. Games of other
// tenants are simply not found: their keys live under another tenant id.
func (s *gameService) owner(ctx context.Context, c *auth.Claims, gameID string) (clusterstate.NodeInfo, error) {
	if gameID == "" {
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeInvalidArgument, errors.New("game_id is required"))
	}
	// Steady state: the watched directory knows the owner. Otherwise the game
	// does not exist, is over or is moving: etcd says which.
	if n, ok := s.g.dir.owner(c.TenantID, gameID); ok {
		return n, nil
	}
	s.g.metrics.etcdReads.Inc()
	g, err := s.g.fleet.Game(ctx, c.TenantID, gameID)
	if errors.Is(err, clusterstate.ErrGameNotFound) {
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no game %q", gameID))
	}
	if err != nil {
		s.g.log.Warn("cannot read a game's owner", "game", gameID, "err", err)
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s cannot be located right now; retry in a moment", gameID))
	}
	if g.Status.State != clusterstate.StateRunning && g.Status.State != "" {
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeFailedPrecondition, &gameOver{game: gameID, status: g.Status})
	}
	if g.Owner == "" {
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s has no running owner right now; retry shortly", gameID))
	}
	if n, ok := s.g.dir.nodeRecord(g.Owner); ok {
		return n, nil
	}
	s.g.metrics.etcdReads.Inc()
	n, err := s.g.fleet.Node(ctx, g.Owner)
	if err != nil {
		return clusterstate.NodeInfo{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s is moving to another node; retry in a moment", gameID))
	}
	return n, nil
}

// gameOver is why a call or stream cannot go on: the game ended, or failed
// for the reason its last node wrote in its status (a resume that desynced, a
// module that trapped). Its message goes to players. Sent as
// FailedPrecondition: the game is over, retrying cannot help.
type gameOver struct {
	game   string
	status clusterstate.GameStatus
}

func (e *gameOver) Error() string {
	if e.status.State == clusterstate.StateFailed && e.status.Message != "" {
		return fmt.Sprintf("game %s failed: %s", e.game, e.status.Message)
	}
	return fmt.Sprintf("game %s is %s", e.game, e.status.State)
}

// gameOverError is the error that ends a stream whose game is over.
func gameOverError(game string, st clusterstate.GameStatus) error {
	return connect.NewError(connect.CodeFailedPrecondition, &gameOver{game: game, status: st})
}

func (s *gameService) JoinGame(ctx context.Context, req *connect.Request[ludusv1.JoinGameRequest]) (*connect.Response[ludusv1.JoinGameResponse], error) {
	c := claimsFrom(ctx)
	if req.Msg.GameId == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("game_id is required"))
	}
	// Charged once the outcome is known: a join answered Unavailable (the
	// game moving, its node replaying it) is a client's retry, and one that
	// ended with the caller (cancelled, past its deadline) did not finish;
	// those cost no token. Every other join does, seated or refused (a full
	// game, one that is over, no such game): each asked the backend.
	if err := s.g.joins.check(c.AccountID); err != nil {
		s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "join_rate").Inc()
		return nil, err
	}
	resp, err := s.joinGame(ctx, c, req.Msg.GameId)
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeCanceled, connect.CodeDeadlineExceeded:
	default:
		s.g.joins.charge(c.AccountID)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// joinGame seats the caller in a game: on its roster in the backend, then on
// the node that runs it.
func (s *gameService) joinGame(ctx context.Context, c *auth.Claims, gameID string) (*ludusv1.JoinGameResponse, error) {
	// The match's roster: the backend credits only accounts on it, so the node
	// running the game cannot credit anyone who did not join through a gateway.
	if _, err := s.g.modules.AddMatchPlayers(ctx, connect.NewRequest(&clusterv1.AddMatchPlayersRequest{
		TenantId: c.TenantID, MatchId: gameID, AccountIds: []string{c.AccountID}})); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no game %q in this tenant", gameID))
		}
		return nil, s.backendError("add match players", err)
	}
	var resp *clusterv1.JoinGameResponse
	err := s.callOwner(ctx, c, gameID, func(ctx context.Context, n clusterstate.NodeInfo) error {
		r, err := s.g.node(n).JoinGame(ctx, connect.NewRequest(&clusterv1.JoinGameRequest{
			TenantId: c.TenantID, GameId: gameID, AccountId: c.AccountID, DisplayName: playerName(c)}))
		if err == nil {
			resp = r.Msg
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ludusv1.JoinGameResponse{Game: resp.Game, Slot: resp.Slot}, nil
}

func (s *gameService) SendInput(ctx context.Context, req *connect.Request[ludusv1.SendInputRequest]) (*connect.Response[ludusv1.SendInputResponse], error) {
	c := claimsFrom(ctx)
	if err := s.checkInput(c, req.Msg.Seq, req.Msg.Payload); err != nil {
		return nil, err
	}
	resp, err := s.sendInput(ctx, c, &clusterv1.SendInputRequest{
		TenantId: c.TenantID, GameId: req.Msg.GameId, AccountId: c.AccountID, Seq: req.Msg.Seq, Payload: req.Msg.Payload})
	if err != nil {
		return nil, err
	}
	s.g.metrics.inputAccepted(c.TenantID)
	return connect.NewResponse(&ludusv1.SendInputResponse{AckedSeq: resp.AckedSeq, Tick: resp.Tick, SupersededBySeq: resp.SupersededBySeq}), nil
}

// checkInput validates one input and takes a token of the account's input rate.
func (s *gameService) checkInput(c *auth.Claims, seq uint64, payload []byte) error {
	if max := s.g.limits.MaxInputBytes; len(payload) > max {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("input payload is %d bytes; the limit is %d", len(payload), max))
	}
	if seq == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("seq must start at 1 and increase with every input"))
	}
	if err := s.g.inputs.allow(c.AccountID); err != nil {
		s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "input_rate").Inc()
		return err
	}
	return nil
}

// openStream takes one of the account's stream slots and counts the stream as
// active; call the returned func when it ends.
func (s *gameService) openStream(c *auth.Claims, kind, gameID string) (func(), error) {
	if gameID == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("game_id is required"))
	}
	release, err := s.g.streams.acquire(c.AccountID)
	if err != nil {
		s.g.metrics.limitRejected.WithLabelValues(c.TenantID, "streams").Inc()
		return nil, err
	}
	done := s.g.metrics.streamOpened(c.TenantID, kind)
	return func() { done(); release() }, nil
}

// frameSink is where a client stream's messages go.
type frameSink struct {
	frame  func(*ludusv1.Frame) error
	status func(*ludusv1.Status) error
	// attached, if set, is told every node the stream attaches to.
	attached func(clusterstate.NodeInfo)
}

// controllerHeader names the client stream a node call belongs to
// (simnode.ControllerHeader): the node lets one client stream control a
// player's slot, the newest, and ends the others' streams with Aborted.
const controllerHeader = "Ludus-Controller"

// newControllerID returns the id of one client stream of a player: its node
// frame streams (one per node it attaches to) and, for Play, its node Inputs
// streams all carry it.
func newControllerID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
}

// streamGame relays a game's frames to one client stream, encoding them as the
// client asked and counting them, until the game ends or the client leaves.
// controller is the client stream's controller id ("" for spectators).
func (s *gameService) streamGame(ctx context.Context, c *auth.Claims, kind, gameID, controller string, accept []ludusv1.FrameEncoding, delivery ludusv1.Delivery, sink frameSink) error {
	fs := framecodec.NewStream(accept)
	meter := s.g.metrics.meter(c.TenantID, kind)
	return s.forward(ctx, c, gameID, controller, kind == kindSpectator, delivery, func(m *clusterv1.StreamFramesResponse) error {
		switch v := m.Msg.(type) {
		case *clusterv1.StreamFramesResponse_Frame:
			return fs.Send(v.Frame, func(f *ludusv1.Frame) error {
				if err := sink.frame(f); err != nil {
					return err
				}
				meter.frame(f.Tick, len(f.View))
				return nil
			})
		case *clusterv1.StreamFramesResponse_Status:
			fs.Status(v.Status)
			return sink.status(v.Status)
		}
		return nil
	}, fs.Reattached, sink.attached)
}

func (s *gameService) StreamFrames(ctx context.Context, req *connect.Request[ludusv1.StreamFramesRequest], stream *connect.ServerStream[ludusv1.StreamFramesResponse]) error {
	c := claimsFrom(ctx)
	done, err := s.openStream(c, kindPlayer, req.Msg.GameId)
	if err != nil {
		return err
	}
	defer done()
	// Frames are encoded per client: deltas against the last frame this stream sent.
	return s.streamGame(ctx, c, kindPlayer, req.Msg.GameId, newControllerID(), req.Msg.AcceptEncodings, req.Msg.Delivery, frameSink{
		frame: func(f *ludusv1.Frame) error {
			return stream.Send(&ludusv1.StreamFramesResponse{Msg: &ludusv1.StreamFramesResponse_Frame{Frame: f}})
		},
		status: func(st *ludusv1.Status) error {
			return stream.Send(&ludusv1.StreamFramesResponse{Msg: &ludusv1.StreamFramesResponse_Status{Status: st}})
		},
	})
}

func (s *gameService) Spectate(ctx context.Context, req *connect.Request[ludusv1.SpectateRequest], stream *connect.ServerStream[ludusv1.SpectateResponse]) error {
	c := claimsFrom(ctx)
	done, err := s.openStream(c, kindSpectator, req.Msg.GameId)
	if err != nil {
		return err
	}
	defer done()
	return s.streamGame(ctx, c, kindSpectator, req.Msg.GameId, "", req.Msg.AcceptEncodings, req.Msg.Delivery, frameSink{
		frame: func(f *ludusv1.Frame) error {
			return stream.Send(&ludusv1.SpectateResponse{Msg: &ludusv1.SpectateResponse_Frame{Frame: f}})
		},
		status: func(st *ludusv1.Status) error {
			return stream.Send(&ludusv1.SpectateResponse{Msg: &ludusv1.SpectateResponse_Status{Status: st}})
		},
	})
}

// Re-attach bounds: how long a stream may wait for a moving game's new owner,
// and how long an upstream may stay silent before it is presumed dead (a node
// publishes a status at least every flush interval, 250 ms).
const (
	reattachTimeout = 30 * time.Second
	upstreamSilence = 3 * time.Second
	nodeCallTimeout = 5 * time.Second
)

// forward relays the owner node's frame stream to the client. When the stream
// ends without the game ending — a handoff, a failover, a dead or frozen node —
// it finds the game's new owner and re-attaches the client's open stream to it:
// the client sees a "migrating" status, then a status with the migration's
// duration and a keyframe, never a reconnect. A game that ends meanwhile ends
// the stream with its final status; one that fails (its new owner could not
// resume it) with a "failed" status carrying the reason, then
// FailedPrecondition. A game no node takes within reattachTimeout ends it
// with Unavailable.
//
// attached, if not nil, is told every node the stream attaches to (Play sends
// the stream's inputs there). controller names the client stream to the node
// (controllerHeader): the same on every node and re-attach, so a stream that
// follows its game never takes its own slot over. A node ends the stream of a
// player another stream took over with Aborted, which is passed on.
func (s *gameService) forward(ctx context.Context, c *auth.Claims, gameID, controller string, spectator bool, delivery ludusv1.Delivery, send func(*clusterv1.StreamFramesResponse) error, reattached func(), attachedTo func(clusterstate.NodeInfo)) error {
	req := &clusterv1.StreamFramesRequest{TenantId: c.TenantID, GameId: gameID, Spectator: spectator, Delivery: delivery}
	if !spectator {
		req.AccountId = c.AccountID
	}
	clk := s.g.clock
	var moving time.Time // when the current move started; zero while attached
	prev := ""
	backoff := 50 * time.Millisecond
	for {
		changed := s.g.dir.changed()
		n, err := s.owner(ctx, c, gameID)
		lookupErr := err
		if err == nil && spectator {
			n = s.spectatorNode(ctx, gameID, n)
		}
		if err == nil {
			var attached bool
			var ended bool
			attached, ended, err = s.relay(ctx, n, req, controller, send, func() {
				if attachedTo != nil {
					attachedTo(n)
				}
				if !moving.IsZero() {
					took := clk.Now().Sub(moving)
					ms := took.Milliseconds()
					s.g.metrics.reattached(c.TenantID, took)
					reattached()
					s.g.log.Info("stream re-attached", "tenant", c.TenantID, "game", gameID, "from", prev, "to", n.ID, "ms", ms)
					_ = send(statusMsg(&ludusv1.Status{
						NodeId: n.ID, State: clusterstate.StateRunning, MigrationMs: ms, PreviousNodeId: prev,
						Message: fmt.Sprintf("moved from node %s to %s in %d ms", prev, n.ID, ms)}))
					moving = time.Time{}
				}
			})
			if ctx.Err() != nil {
				return nil
			}
			if ended {
				return err // nil, or the failure the node's last status gave
			}
			if attached {
				// Only a node that served the stream is where it came from.
				backoff = 50 * time.Millisecond
				prev = n.ID
			}
		}
		s.g.log.Debug("stream upstream ended", "game", gameID, "prev", prev, "err", err)
		if over := (*gameOver)(nil); prev != "" && errors.As(lookupErr, &over) {
			// The game ended or failed while the stream was moving (its new
			// owner could not resume it): the client hears its last status
			// and why, never a "migrating" that goes silent.
			st := over.status
			if err := send(statusMsg(&ludusv1.Status{NodeId: st.NodeID, State: st.State, Tick: st.Tick, Message: st.Message})); err != nil {
				return nil // the client is gone
			}
			if st.State == clusterstate.StateEnded {
				return nil
			}
			return lookupErr
		}
		if err != nil && !retryable(err) {
			if lookupErr != nil {
				return err // from the owner lookup: already what the player should see
			}
			return playerError(gameID, err) // the node's refusal, e.g. snapshots of a module without a renderer
		}
		if err != nil && prev == "" {
			// Never attached: the game does not exist or cannot be reached now.
			if lookupErr != nil {
				return err
			}
			return playerError(gameID, err)
		}
		if moving.IsZero() {
			moving = clk.Now()
			if err := send(statusMsg(&ludusv1.Status{
				NodeId: prev, State: "migrating", Message: "the game is moving to another node"})); err != nil {
				return err
			}
		}
		if clk.Now().Sub(moving) > reattachTimeout {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf(
				"game %s is not running anywhere right now: no node took it over within %v; retry later", gameID, reattachTimeout))
		}
		// Wait for the directory to change (the new owner's claim) or, as a
		// fallback, the backoff: a handoff completes in tens of milliseconds.
		t := clk.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
		case <-t.C():
		}
		t.Stop()
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

// statusMsg wraps a status for the client's stream.
func statusMsg(st *ludusv1.Status) *clusterv1.StreamFramesResponse {
	return &clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Status{Status: st}}
}

// relay streams from one node until the upstream ends. attached reports whether
// the node accepted the stream (its first message arrived); ended whether the
// stream is over: the game ended (err nil), failed (err says why, after its
// "failed" status was sent) or the client went away (err nil).
func (s *gameService) relay(ctx context.Context, n clusterstate.NodeInfo, req *clusterv1.StreamFramesRequest, controller string, send func(*clusterv1.StreamFramesResponse) error, onAttach func()) (attached, ended bool, err error) {
	upCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	upReq := connect.NewRequest(req)
	if controller != "" {
		upReq.Header().Set(controllerHeader, controller)
	}
	up, err := s.g.node(n).StreamFrames(upCtx, upReq)
	if err != nil {
		return false, false, err
	}
	defer up.Close()
	// A frozen node (SIGSTOP, a partition) keeps the connection open and silent.
	alive := watchSilence(upCtx, s.g.clock, upstreamSilence, cancel)
	for up.Receive() {
		alive()
		m := up.Msg()
		if !attached {
			attached = true
			onAttach()
		}
		if st := m.GetStatus(); st != nil {
			switch st.State {
			case "moved":
				// The node handed the game off or lost it: find the new owner.
				return attached, false, nil
			case clusterstate.StateEnded:
				_ = send(m)
				return attached, true, nil
			case clusterstate.StateFailed:
				if send(m) != nil {
					return attached, true, nil // the client is gone
				}
				return attached, true, gameOverError(req.GameId, clusterstate.GameStatus{
					State: st.State, Tick: st.Tick, NodeID: st.NodeId, Message: st.Message})
			}
		}
		if err := send(m); err != nil {
			return attached, true, nil // the client is gone
		}
	}
	if ctx.Err() != nil {
		return attached, true, nil
	}
	if err := up.Err(); err != nil {
		return attached, false, err
	}
	return attached, false, nil
}

// watchSilence calls giveUp once d passes on clk without a call of the
// returned alive; it stops when ctx ends. alive only stores the time (it is
// called for every message of a stream): the watchdog wakes when its timer
// fires, not per message, and re-arms for what is left of d after the last.
func watchSilence(ctx context.Context, clk Clock, d time.Duration, giveUp func()) (alive func()) {
	var last atomic.Int64 // clk.Now of the last message, Unix ns
	last.Store(clk.Now().UnixNano())
	t := clk.NewTimer(d)
	go func() {
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				if left := time.Duration(last.Load()+int64(d)) - time.Duration(clk.Now().UnixNano()); left > 0 {
					t.Reset(left)
					continue
				}
				giveUp()
				return
			}
		}
	}()
	return func() { last.Store(clk.Now().UnixNano()) }
}

// spectatorNode picks the node that serves a game's spectators: a node other
// than the owner (it replays the game's log, so spectators never load the
// owner), the first in the fleet's rendezvous order for the game, so every
// gateway sends a game's spectators to the same replica. With one node, the
// owner serves them.
func (s *gameService) spectatorNode(ctx context.Context, gameID string, owner clusterstate.NodeInfo) clusterstate.NodeInfo {
	nodes, err := s.nodes(ctx)
	if err != nil {
		return owner
	}
	if r := fleet.Rank(nodes, gameID, fleet.RankOptions{Exclude: owner.ID}); len(r) > 0 {
		return r[0]
	}
	return owner
}

// playerName is the name other players see: the ticket's display name, or
// for an account that has none the name the backend gives a nameless guest
// (auth.GuestName), so the lobby says whose game it is and the scoreboard
// tells two nameless players apart.
func playerName(c *auth.Claims) string {
	if strings.TrimSpace(c.DisplayName) != "" || c.AccountID == "" {
		return c.DisplayName
	}
	return auth.GuestName(c.AccountID)
}
