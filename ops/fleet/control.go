package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
)

// Control serves the FleetService: operators drain nodes and move games. It
// acts through etcd (drain keys) and the nodes' NodeControlService.
type Control struct {
	Etcd *clusterstate.Client
	// OperatorKey authorizes callers; empty disables the service.
	OperatorKey string
	// ClusterToken authenticates this service to the sim nodes.
	ClusterToken string
	// HTTPClient reaches the nodes (h2c).
	HTTPClient *http.Client
	// HandoffWait bounds how long HandoffGame waits for the new owner to
	// report the game running (or failed); default 10 s.
	HandoffWait time.Duration
}

// Handler returns the FleetService's path and handler.
func (c *Control) Handler() (string, http.Handler) {
	return ludusv1connect.NewFleetServiceHandler(c)
}

func (c *Control) authorize(h http.Header) error {
	key, ok := bearer.FromHeader(h)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errors.New(`missing API key: send "Authorization: Bearer <operator key>"`))
	}
	if c.OperatorKey == "" {
		return connect.NewError(connect.CodePermissionDenied, errors.New("fleet operations need the operator key"))
	}
	want := bearer.HashOf(c.OperatorKey)
	if !bearer.Matches(key, &want) {
		return connect.NewError(connect.CodePermissionDenied, errors.New("fleet operations need the operator key"))
	}
	return nil
}

// nodeClient calls one sim node's NodeControlService with the credential
// derived for that node (auth/clustercred): the node can check it without
// holding the cluster token.
func (c *Control) nodeClient(n clusterstate.NodeInfo) (clusterv1connect.NodeControlServiceClient, error) {
	cred, err := clustercred.GatewayToNode(c.ClusterToken, n.ID)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("credential for node %s: %w", n.ID, err))
	}
	return clusterv1connect.NewNodeControlServiceClient(c.HTTPClient, n.Addr, connect.WithInterceptors(bearer.Token(cred))), nil
}

// DrainNode marks the node for draining; the node hands its games over and exits.
func (c *Control) DrainNode(ctx context.Context, req *connect.Request[ludusv1.DrainNodeRequest]) (*connect.Response[ludusv1.DrainNodeResponse], error) {
	if err := c.authorize(req.Header()); err != nil {
		return nil, err
	}
	n, err := c.Etcd.View().Node(ctx, req.Msg.NodeId)
	if errors.Is(err, clusterstate.ErrNodeNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no sim node %q is registered", req.Msg.NodeId))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if err := c.Etcd.RequestDrain(ctx, n.ID); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&ludusv1.DrainNodeResponse{Games: int32(n.Games)}), nil
}

// HandoffGame asks the game's owner to move it.
func (c *Control) HandoffGame(ctx context.Context, req *connect.Request[ludusv1.HandoffGameRequest]) (*connect.Response[ludusv1.HandoffGameResponse], error) {
	if err := c.authorize(req.Header()); err != nil {
		return nil, err
	}
	v := c.Etcd.View()
	g, err := v.Game(ctx, req.Msg.TenantId, req.Msg.GameId)
	if errors.Is(err, clusterstate.ErrGameNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no game %q in tenant %q", req.Msg.GameId, req.Msg.TenantId))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if g.Owner == "" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("game %s has no running owner (state %q)", req.Msg.GameId, g.Status.State))
	}
	owner, err := v.Node(ctx, g.Owner)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	client, err := c.nodeClient(owner)
	if err != nil {
		return nil, err
	}
	resp, err := client.HandoffGame(ctx, connect.NewRequest(&clusterv1.HandoffGameRequest{
		TenantId: req.Msg.TenantId, GameId: req.Msg.GameId, TargetNodeId: req.Msg.TargetNodeId}))
	if err != nil {
		return nil, err
	}
	if err := c.awaitResumed(ctx, req.Msg.TenantId, req.Msg.GameId, resp.Msg.ToNodeId, resp.Msg.Tick); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.HandoffGameResponse{FromNodeId: owner.ID, ToNodeId: resp.Msg.ToNodeId}), nil
}

// maxEndReason bounds EndGame's reason (it is shown to players and archived).
const maxEndReason = 200

// EndGame asks the game's owner to end it now, as failed with the reason.
func (c *Control) EndGame(ctx context.Context, req *connect.Request[ludusv1.EndGameRequest]) (*connect.Response[ludusv1.EndGameResponse], error) {
	if err := c.authorize(req.Header()); err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.Msg.Reason)
	switch {
	case req.Msg.TenantId == "" || req.Msg.GameId == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("tenant_id and game_id are required"))
	case utf8.RuneCountInString(reason) > maxEndReason || !utf8.ValidString(reason):
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reason must be valid UTF-8 of at most %d characters", maxEndReason))
	case reason == "":
		reason = "no reason given"
	}
	v := c.Etcd.View()
	g, err := v.Game(ctx, req.Msg.TenantId, req.Msg.GameId)
	if errors.Is(err, clusterstate.ErrGameNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no game %q in tenant %q", req.Msg.GameId, req.Msg.TenantId))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if g.Status.Finished() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("game %s has already finished (%s)", req.Msg.GameId, g.Status.State))
	}
	if g.Owner == "" {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("game %s is moving between nodes; retry in a moment", req.Msg.GameId))
	}
	owner, err := v.Node(ctx, g.Owner)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	client, err := c.nodeClient(owner)
	if err != nil {
		return nil, err
	}
	resp, err := client.EndGame(ctx, connect.NewRequest(&clusterv1.EndGameRequest{
		TenantId: req.Msg.TenantId, GameId: req.Msg.GameId, Reason: reason}))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.EndGameResponse{NodeId: owner.ID, Tick: resp.Msg.Tick}), nil
}

// awaitResumed waits until node reports the game running past tick (the
// tick it moved at: the new owner replayed the log and stepped on), or the
// game finished. A game that failed — the new owner's replay desynced, the
// module trapped or is missing — is an Aborted error with the game's status
// message; no word within HandoffWait is DeadlineExceeded.
func (c *Control) awaitResumed(ctx context.Context, tenant, game, node string, tick int64) error {
	wait := c.HandoffWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v := c.Etcd.View()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	var last clusterstate.Game
	for {
		g, err := v.Game(ctx, tenant, game)
		switch {
		case errors.Is(err, clusterstate.ErrGameNotFound):
			// Finished and archived already: the archive has the outcome.
			return nil
		case err == nil:
			last = g
			if g.Status.State == clusterstate.StateFailed {
				return connect.NewError(connect.CodeAborted, fmt.Errorf("game %s moved to node %s at tick %d, then failed: %s", game, node, tick, g.Status.Message))
			}
			if g.Status.Finished() || (g.Owner == node && g.Status.State == clusterstate.StateRunning && g.Status.NodeID == node && g.Status.Tick > tick) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
				"game %s moved to node %s at tick %d, but the node has not reported it running within %v (owner %q, state %q at tick %d)",
				game, node, tick, wait, last.Owner, last.Status.State, last.Status.Tick))
		case <-poll.C:
		}
	}
}
