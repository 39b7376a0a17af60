package simnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/simnode/engine"
)

// Limits on what a gateway may pass through.
const (
	maxConfigBytes  = 4 << 10
	maxPayloadBytes = 256
	maxNameRunes    = 32
	// maxReserved bounds a matched game's reserved accounts (the ABI's
	// most players).
	maxReserved = 64
)

// service implements clusterv1connect.NodeServiceHandler.
type service struct{ n *Node }

func (s *service) StartGame(ctx context.Context, req *connect.Request[clusterv1.StartGameRequest]) (*connect.Response[clusterv1.StartGameResponse], error) {
	m := req.Msg
	if !clusterstate.ValidID(m.TenantId) || !clusterstate.ValidID(m.GameId) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("tenant_id and game_id must be 1..64 characters of [A-Za-z0-9_-]"))
	}
	if len(m.Config) > maxConfigBytes {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("config is %d bytes; the limit is %d", len(m.Config), maxConfigBytes))
	}
	if len(m.ReservedAccounts) > maxReserved {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d reserved accounts; a game seats at most %d", len(m.ReservedAccounts), maxReserved))
	}
	for _, a := range m.ReservedAccounts {
		if !clusterstate.ValidID(a) {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("reserved_accounts must be account ids of 1..64 characters of [A-Za-z0-9_-]"))
		}
	}
	g, err := s.n.StartGame(ctx, clusterstate.GameSpec{
		TenantID: m.TenantId, GameID: m.GameId, ModuleName: m.ModuleName, BuildID: m.BuildId,
		Seed: m.Seed, Config: m.Config, MatchCredential: m.MatchCredential, HostName: m.HostName,
		Reserved: m.ReservedAccounts,
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&clusterv1.StartGameResponse{Game: g.info()}), nil
}

// StartGame loads the module, initializes a new match, claims it in etcd and
// starts its actor. Errors are Connect errors.
func (n *Node) StartGame(ctx context.Context, spec clusterstate.GameSpec) (*game, error) {
	if n.draining.Load() {
		return nil, nodeErrorf(errDraining, "node %s is draining and takes no new games", n.cfg.ID)
	}
	sess := n.sess.Load()
	if sess.Fenced() {
		return nil, nodeErrorf(errFenced, "this node lost its lease and accepts no games until it registers again")
	}
	if int(n.count.Load()) >= n.cfg.Capacity {
		return nil, nodeErrorf(errNodeFull, "node %s is full (%d games)", n.cfg.ID, n.cfg.Capacity)
	}
	mod, err := n.loadModule(ctx, spec.TenantID, spec.BuildID)
	if err != nil {
		return nil, err
	}
	spec.TickRate, spec.MaxPlayers = mod.Meta.TickRate, mod.Meta.MaxPlayers
	spec.FrameDivisor, spec.ViewFormat = mod.Meta.FrameDivisor, mod.Meta.ViewFormat
	spec.InputKind, spec.SnapshotFormat = mod.Meta.Inputs(), mod.Meta.SnapshotFormat
	spec.ViewWidth, spec.ViewHeight = mod.Meta.ViewWidth, mod.Meta.ViewHeight
	if meta, err := json.Marshal(mod.Meta); err == nil {
		spec.ModuleMeta = meta
	}
	spec.Bots = configBots(spec.Config)
	if spec.Bots > 0 && !mod.Meta.Bots {
		return nil, nodeErrorf(errBadConfig, "module %s does not take bots (its metadata does not declare \"bots\": true); create the game with bots 0", mod.Meta.Name)
	}
	if spec.ModuleName == "" {
		spec.ModuleName = mod.Meta.Name
	}
	spec.CreatedAt = time.Now().UTC()
	spec.Region = n.cfg.Region
	// Each match gets its own instance with the node's memory cap and call
	// deadline, from the build's warm pool when it has one ready.
	opts := n.instanceOptions(spec)
	n.warm.started(n.cfg.Clock.Now(), mod, opts)
	inst, warm, err := mod.Acquire(ctx, spec.Seed, opts)
	if err != nil {
		return nil, nodeErrorf(errModuleUnusable, "the module cannot be instantiated: %v", err)
	}
	n.metrics.warm.WithLabelValues(strconv.FormatBool(warm)).Inc()
	// The guest log starts before Init, so what Init prints is in it.
	glog := newGuestLog()
	inst.SetOutputSink(glog.add)
	if err := inst.Init(ctx, spec.Seed, spec.Config); err != nil {
		inst.Close(ctx)
		var te *engine.TrapError
		if errors.As(err, &te) {
			// In the module's words: "module refused the config: unknown
			// map "dust3" (Init returned 1)".
			n.log.Info("game refused its configuration", "tenant", spec.TenantID, "game", spec.GameID, "build", spec.BuildID,
				"tick", 0, "err", err, "guest_output", inst.Output())
			return nil, nodeErrorf(errBadConfig, "%s", te.Reason())
		}
		return nil, nodeErrorf(errBadConfig, "the game refused its configuration: %v", err)
	}
	// The claim's own watch event must not make this node "adopt" the game.
	key := gameKey(spec.TenantID, spec.GameID)
	n.resuming.Store(key+"#adopt", true)
	defer n.resuming.Delete(key + "#adopt")
	claim, err := n.claim(ctx, spec, sess)
	if err != nil {
		inst.Close(ctx)
		return nil, err
	}
	g := newGame(n, sess, spec, mod, inst, claim)
	g.useGuestLog(glog)
	g.hasCheckpoint = mod.HasCheckpoint
	n.count.Add(1)
	n.games.Store(gameKey(spec.TenantID, spec.GameID), g)
	go g.run()
	g.log.Info("game started", "tick", 0, "fence", claim.Fence, "warm", warm)
	return g, nil
}

// instanceOptions are the limits of one match's instance. They are node-wide
// for now; per-tenant quotas (pages, deadline) would be looked up here by
// spec.TenantID, each distinct value getting its own warm pool.
func (n *Node) instanceOptions(clusterstate.GameSpec) engine.InstanceOptions {
	return engine.InstanceOptions{MemoryLimitPages: n.cfg.MemoryLimitPages, CallDeadline: n.cfg.CallDeadline}
}

// claim creates the game's spec and owner key in one transaction that succeeds
// only if neither exists; the owner key's create revision is the fencing token.
func (n *Node) claim(ctx context.Context, spec clusterstate.GameSpec, sess *clusterstate.Session) (clusterstate.Claim, error) {
	c, err := n.cfg.Etcd.Claim(ctx, sess, spec, n.cfg.ID)
	switch {
	case errors.Is(err, clusterstate.ErrGameExists):
		return c, nodeErrorf(clusterstate.ErrGameExists, "game %s already exists", spec.GameID)
	case err != nil:
		return c, nodeErrorf(errClusterState, "the game could not be claimed in etcd: %v", err)
	}
	return c, nil
}

func (n *Node) loadModule(ctx context.Context, tenant, buildID string) (*engine.Module, error) {
	if m, ok := n.cfg.Engine.Module(buildID); ok {
		return m, nil
	}
	wasm, err := n.cfg.Modules.FetchModule(ctx, tenant, buildID)
	if err != nil {
		return nil, err
	}
	if got := engine.BuildID(wasm); got != buildID {
		return nil, nodeErrorf(errModuleMismatch, "module store returned build %s for %s", got, buildID)
	}
	m, err := n.cfg.Engine.Compile(ctx, wasm)
	if err != nil {
		return nil, nodeErrorf(errModuleUnusable, "the module does not compile: %v", err)
	}
	return m, nil
}

func (g *game) info() *ludusv1.GameInfo {
	st := g.status.load().v
	return &ludusv1.GameInfo{
		GameId: g.spec.GameID, ModuleName: g.spec.ModuleName, BuildId: g.spec.BuildID,
		NodeId: g.n.cfg.ID, MaxPlayers: int32(g.spec.MaxPlayers), Players: int32(st.Players),
		Tick: st.Tick, State: st.State, TickRate: int32(g.spec.TickRate), ViewFormat: g.spec.ViewFormat,
		SnapshotFormat: g.spec.SnapshotFormat, InputKind: g.spec.InputKind,
		Bots: int32(g.spec.Bots), HostName: g.spec.HostName, CreatedAtUnixMs: g.spec.CreatedAt.UnixMilli(),
	}
}

func (s *service) lookup(tenant, id string) (*game, error) {
	g, ok := s.n.game(tenant, id)
	if !ok {
		if _, resuming := s.n.resuming.Load(gameKey(tenant, id)); resuming {
			return nil, connectError(nodeErrorf(errResuming, "game %q is resuming on node %s; retry in a moment", id, s.n.cfg.ID))
		}
		return nil, connectError(nodeErrorf(errNotHere, "game %q is not running on node %s", id, s.n.cfg.ID))
	}
	return g, nil
}

func (s *service) GetGame(ctx context.Context, req *connect.Request[clusterv1.GetGameRequest]) (*connect.Response[clusterv1.GetGameResponse], error) {
	g, err := s.lookup(req.Msg.TenantId, req.Msg.GameId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterv1.GetGameResponse{Game: g.info()}), nil
}

func (s *service) JoinGame(ctx context.Context, req *connect.Request[clusterv1.JoinGameRequest]) (*connect.Response[clusterv1.JoinGameResponse], error) {
	m := req.Msg
	if m.AccountId == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("account_id is required"))
	}
	g, err := s.lookup(m.TenantId, m.GameId)
	if err != nil {
		return nil, err
	}
	name := []rune(m.DisplayName)
	if len(name) > maxNameRunes {
		name = name[:maxNameRunes]
	}
	reply := make(chan joinResult, 1)
	if err := g.send(ctx, joinReq{account: m.AccountId, name: string(name), reply: reply}); err != nil {
		return nil, connectError(err)
	}
	select {
	case r := <-reply:
		if r.err != nil {
			return nil, connectError(r.err)
		}
		return connect.NewResponse(&clusterv1.JoinGameResponse{Game: g.info(), Slot: int32(r.slot)}), nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func (s *service) SendInput(ctx context.Context, req *connect.Request[clusterv1.SendInputRequest]) (*connect.Response[clusterv1.SendInputResponse], error) {
	m := req.Msg
	if len(m.Payload) > maxPayloadBytes {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("input payload is %d bytes; the limit is %d", len(m.Payload), maxPayloadBytes))
	}
	if m.Seq == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("seq must start at 1 and increase with every input"))
	}
	g, err := s.lookup(m.TenantId, m.GameId)
	if err != nil {
		return nil, err
	}
	reply := make(chan inputResult, 1)
	if err := g.send(ctx, inputReq{account: m.AccountId, seq: m.Seq, payload: append([]byte(nil), m.Payload...), reply: reply}); err != nil {
		return nil, connectError(err)
	}
	select {
	case r := <-reply:
		if r.err != nil {
			return nil, connectError(r.err)
		}
		return connect.NewResponse(&clusterv1.SendInputResponse{AckedSeq: r.ackedSeq, Tick: r.tick, SupersededBySeq: r.supersededBy}), nil
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
}

func (s *service) StreamFrames(ctx context.Context, req *connect.Request[clusterv1.StreamFramesRequest], stream *connect.ServerStream[clusterv1.StreamFramesResponse]) error {
	m := req.Msg
	g, owned := s.n.game(m.TenantId, m.GameId)
	if !owned && m.Spectator && clusterstate.ValidID(m.TenantId) && clusterstate.ValidID(m.GameId) {
		// Not ours: serve spectators from a replica that tails the log.
		r, err := s.n.spectate(ctx, m.TenantId, m.GameId)
		if err != nil {
			return connectError(replicaError(m.GameId, err))
		}
		snapshots, err := wantSnapshots(r.spec, m.Delivery)
		if err != nil {
			return connectError(err)
		}
		frames, counter := r.view.stream(snapshots)
		r.viewerJoined()
		defer r.viewerLeft()
		counter.Add(1)
		defer counter.Add(-1)
		return s.pump(ctx, r.spec, -1, snapshots, frames, r.status, r.done, nil, stream)
	}
	g, err := s.lookup(m.TenantId, m.GameId)
	if err != nil {
		return err
	}
	snapshots, err := wantSnapshots(g.spec, m.Delivery)
	if err != nil {
		return connectError(err)
	}
	slot := -1
	view := g.specView
	var replaced <-chan struct{}
	if !m.Spectator {
		// The stream controls the player's slot until a newer one takes it
		// over (control.go); while none is attached the player may abandon it.
		var ctl *controller
		if slot, ctl, err = g.attachPlayer(ctx, m.AccountId, req.Header().Get(ControllerHeader)); err != nil {
			return connectError(err)
		}
		defer g.detachPlayer(slot, ctl)
		view, replaced = g.slots[slot].view, ctl.ended
	}
	frames, counter := view.stream(snapshots)
	counter.Add(1)
	defer counter.Add(-1)
	return s.pump(ctx, g.spec, slot, snapshots, frames, g.status, g.done, replaced, stream)
}

// pump sends the newest frame whenever one is published and every status change,
// until the game stops, the client goes away or (replaced closed) another
// stream of the player takes its slot over. It never waits on the game: a
// slow client just sees fewer frames.
func (s *service) pump(ctx context.Context, spec clusterstate.GameSpec, slot int, snapshots bool, frames *cell[Frame], status *cell[Status], done, replaced <-chan struct{}, stream *connect.ServerStream[clusterv1.StreamFramesResponse]) error {
	delivery, snapshotFormat, buildID := deliveryPixels, "", ""
	if snapshots {
		delivery, snapshotFormat, buildID = deliverySnapshots, spec.SnapshotFormat, spec.BuildID
	}
	meta := string(spec.ModuleMeta) // first status only: it never changes
	sendStatus := func(st Status) error {
		err := stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Status{Status: &ludusv1.Status{
			NodeId: s.n.cfg.ID, Region: s.n.cfg.Region, Tick: st.Tick, State: st.State, Message: st.Message,
			Slot: int32(slot), ViewFormat: spec.ViewFormat, TickRate: int32(spec.TickRate),
			Delivery: delivery, SnapshotFormat: snapshotFormat, BuildId: buildID, ModuleMeta: meta, ResultJson: string(st.Result),
		}}})
		meta = ""
		return err
	}
	stv := status.load()
	if err := sendStatus(stv.v); err != nil {
		return err
	}
	var lastSeq uint64
	fv := frames.load()
	for {
		if fv.seq > lastSeq && fv.v.View != nil {
			lastSeq = fv.seq
			if err := stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Frame{
				Frame: &ludusv1.Frame{Tick: fv.v.Tick, View: fv.v.View}}}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-replaced:
			return connectError(errReplaced)
		case <-fv.next:
			fv = frames.load()
		case <-stv.next:
			stv = status.load()
			if err := sendStatus(stv.v); err != nil {
				return err
			}
			if stv.v.State != clusterstate.StateRunning {
				return nil
			}
		case <-done:
			// The actor published its last status before finishing.
			if st := status.load(); st != stv {
				_ = sendStatus(st.v)
			}
			return nil
		}
	}
}

// configBots reads the "bots" count the gateway sets in a config for a game
// created with bots (0 when the config is not a JSON object or has none).
func configBots(config []byte) int {
	var c struct {
		Bots int `json:"bots"`
	}
	if len(config) == 0 || config[0] != '{' || json.Unmarshal(config, &c) != nil {
		return 0
	}
	return c.Bots
}

// replicaError says why a spectator replica of game could not start, as a
// node error whose kind gives the right code: a game that is gone, the
// module (its build unusable here, or its Init or a call trapping), the
// caller giving up, or else etcd. Only the last is worth retrying soon.
func replicaError(game string, err error) error {
	var ne *nodeError
	var trap *engine.TrapError
	switch {
	case errors.Is(err, clusterstate.ErrGameNotFound):
		return nodeErrorf(errNoSuchGame, "no game %q", game)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return err
	case errors.As(err, &trap):
		return nodeErrorf(errModuleUnusable, "the game's module cannot show it to spectators: %v", err)
	}
	return nodeErrorf(errClusterState, "spectator replica: %v", err)
}
