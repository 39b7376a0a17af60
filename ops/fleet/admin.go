package fleet

import (
	"context"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Admin adapts a View to the backend's admin listing of nodes and games.
type Admin struct{ View *clusterstate.View }

// ListNodes lists the fleet's sim nodes.
func (a Admin) ListNodes(ctx context.Context) ([]*ludusv1.Node, error) {
	nodes, err := a.View.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*ludusv1.Node, len(nodes))
	for i, n := range nodes {
		out[i] = &ludusv1.Node{Id: n.ID, Address: n.Addr, Region: n.Region,
			Capacity: int32(n.Capacity), Games: int32(n.Games), Draining: n.Draining}
	}
	return out, nil
}

// ListGames lists a tenant's games, running or finished, still known to etcd.
func (a Admin) ListGames(ctx context.Context, tenantID string) ([]*ludusv1.GameInfo, error) {
	games, err := a.View.Games(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := make([]*ludusv1.GameInfo, len(games))
	for i, g := range games {
		out[i] = GameInfo(g)
	}
	return out, nil
}

// GameInfo converts a Game to its API form.
func GameInfo(g clusterstate.Game) *ludusv1.GameInfo {
	return &ludusv1.GameInfo{
		GameId: g.Spec.GameID, ModuleName: g.Spec.ModuleName, BuildId: g.Spec.BuildID,
		NodeId: g.Owner, MaxPlayers: int32(g.Spec.MaxPlayers), Players: int32(g.Status.Players),
		Tick: g.Status.Tick, State: g.Status.State, TickRate: int32(g.Spec.TickRate), ViewFormat: g.Spec.ViewFormat,
		SnapshotFormat: g.Spec.SnapshotFormat, InputKind: g.Spec.InputKind,
	}
}
