package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// GameLogs serves the GameLogService to studios (a tenant API key): a game's
// guest log streamed from the node that runs it (NodeControlService.GameLogs,
// found through etcd), or read from its archive once it is over; and module
// builds for replays.
type GameLogs struct {
	Etcd *clusterstate.Client
	// ClusterToken authenticates this service to the sim nodes.
	ClusterToken string
	// HTTPClient reaches the nodes (h2c).
	HTTPClient *http.Client
	// Authorize returns the caller's tenant, or a Connect error; the
	// backend's (*backend.Server).AuthorizeTenant.
	Authorize func(ctx context.Context, h http.Header, method string, write bool) (tenantID string, err error)
	// Store reads archives and builds; the backend (*backend.Server).
	Store DebugStore
}

// DebugStore is what GameLogs reads from the backend. Errors are Connect
// errors (NotFound when there is no such archive or build).
type DebugStore interface {
	// ArchivedGuestLog returns an archived game's guest log (nil if its
	// archive has none), state and message.
	ArchivedGuestLog(ctx context.Context, tenantID, gameID string) (log *ludusv1.GuestLog, state, message string, err error)
	// TenantBuild returns a module build of the tenant: its bytes and name.
	TenantBuild(ctx context.Context, tenantID, buildID string) (wasm []byte, name string, err error)
}

// Handler returns the GameLogService's path and handler.
func (s *GameLogs) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return ludusv1connect.NewGameLogServiceHandler(s, opts...)
}

// GameLogs implements ludusv1connect.GameLogServiceHandler.
func (s *GameLogs) GameLogs(ctx context.Context, req *connect.Request[ludusv1.GameLogsRequest], stream *connect.ServerStream[ludusv1.GameLogsResponse]) error {
	tenant, err := s.Authorize(ctx, req.Header(), "GameLogs", false)
	if err != nil {
		return err
	}
	game := req.Msg.GameId
	if !clusterstate.ValidID(game) {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("game_id must be 1..64 characters of [A-Za-z0-9_-]"))
	}
	after := req.Msg.AfterSeq
	for moves := 0; ; moves++ {
		g, err := s.Etcd.View().Game(ctx, tenant, game)
		switch {
		case errors.Is(err, clusterstate.ErrGameNotFound):
			return s.archived(ctx, tenant, game, after, stream)
		case err != nil:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s cannot be located right now; retry in a moment", game))
		}
		node := g.Owner
		if node == "" {
			node = g.Status.NodeID // finished, not archived yet: its last node keeps the log
		}
		if node == "" {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s has no node now (state %q); retry in a moment", game, g.Status.State))
		}
		state, err := s.proxy(ctx, tenant, game, node, after, req.Msg.Follow, stream)
		if err != nil {
			return err
		}
		// A followed game that moved continues on its new owner, whose log
		// starts again at seq 1.
		if state != "moved" || !req.Msg.Follow || moves >= 10 || ctx.Err() != nil {
			return nil
		}
		after = 0
	}
}

// proxy streams node's guest log of the game to stream and returns the final
// state the node reported ("" if none).
func (s *GameLogs) proxy(ctx context.Context, tenant, game, nodeID string, after uint64, follow bool, stream *connect.ServerStream[ludusv1.GameLogsResponse]) (string, error) {
	n, err := s.Etcd.View().Node(ctx, nodeID)
	if err != nil {
		return "", unreachable(game)
	}
	client, err := (&Control{ClusterToken: s.ClusterToken, HTTPClient: s.HTTPClient}).nodeClient(n)
	if err != nil {
		return "", unreachable(game)
	}
	st, err := client.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: tenant, GameId: game, AfterSeq: after, Follow: follow}))
	if err != nil {
		return "", tenantFacing(game, err)
	}
	defer st.Close()
	state := ""
	for st.Receive() {
		m := st.Msg().GetLog()
		if m == nil {
			continue
		}
		state = m.State
		if err := stream.Send(m); err != nil {
			return "", err
		}
	}
	if err := st.Err(); err != nil && ctx.Err() == nil {
		return "", tenantFacing(game, err)
	}
	return state, nil
}

// tenantFacing is what a tenant's caller sees of a failed call to a node:
// the node's own refusals (about the game or the request) keep their
// message; anything else, such as a dial error, which names the node's
// address (the operator's network, never shown to tenants), says only that
// the node cannot be reached.
func tenantFacing(game string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		return err
	case connect.CodeCanceled, connect.CodeDeadlineExceeded:
		return connect.NewError(connect.CodeOf(err), errors.New("the call ended before the log was read"))
	}
	return unreachable(game)
}

func unreachable(game string) error {
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the node running game %s cannot be reached right now; retry in a moment", game))
}

// archived sends an ended game's archived guest log.
func (s *GameLogs) archived(ctx context.Context, tenant, game string, after uint64, stream *connect.ServerStream[ludusv1.GameLogsResponse]) error {
	gl, state, message, err := s.Store.ArchivedGuestLog(ctx, tenant, game)
	if err != nil {
		return err
	}
	resp := &ludusv1.GameLogsResponse{State: state, Message: message, Archived: true}
	if gl != nil {
		resp.Dropped = gl.Dropped
		for _, l := range gl.Lines {
			if l.Seq > after {
				resp.Lines = append(resp.Lines, l)
			}
		}
	}
	return stream.Send(resp)
}

// GetBuild implements ludusv1connect.GameLogServiceHandler.
func (s *GameLogs) GetBuild(ctx context.Context, req *connect.Request[ludusv1.GetBuildRequest]) (*connect.Response[ludusv1.GetBuildResponse], error) {
	tenant, err := s.Authorize(ctx, req.Header(), "GetBuild", false)
	if err != nil {
		return nil, err
	}
	b := req.Msg.BuildId
	if len(b) != 64 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("build_id is the 64 hex digits of a module's SHA-256"))
	}
	wasm, name, err := s.Store.TenantBuild(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.GetBuildResponse{Wasm: wasm, Name: name}), nil
}
