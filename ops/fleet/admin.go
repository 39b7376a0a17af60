package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// ActiveBatchBuilds maps each of the tenant's batch runs that have not ended
// (admitting or running) to the build its spec names. An admitting run's
// spec names its build already (package batch resolves it before admitting).
func (a Admin) ActiveBatchBuilds(ctx context.Context, tenantID string) (map[string]string, error) {
	runs, err := a.View.Client.BatchRuns(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range runs {
		if r.State == clusterstate.BatchEnded {
			continue
		}
		build, err := specBuild(r.Spec)
		if err != nil {
			return nil, fmt.Errorf("batch run %s: %w", r.ID, err)
		}
		out[r.ID] = build
	}
	return out, nil
}

// specBuild reads the build a batch run's spec (package batch's Spec, as
// JSON) names: the one field read here, as importing batch would bring its
// engine; TestSpecBuildReadsBatchSpec keeps the two in step.
func specBuild(spec []byte) (string, error) {
	var s struct {
		BuildID string `json:"build_id"`
	}
	if err := json.Unmarshal(spec, &s); err != nil {
		return "", fmt.Errorf("its spec cannot be read, so which build it plays is unknown: %w", err)
	}
	if s.BuildID == "" {
		return "", errors.New("its spec names no build")
	}
	return s.BuildID, nil
}
