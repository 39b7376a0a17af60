// Package simnode runs matches: it hosts game modules (package engine), runs each
// game as an actor owned by one goroutine, claims games under a lease session,
// appends every game's input log to etcd in fenced group commits (all of it
// through package clusterstate), and serves the gateways through the internal
// NodeService.
//
// Reads are lock-free: frames and status are published through atomic pointer
// swaps (see cell); everything that changes a game is a message to its actor.
package simnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/internal/clock"
	"ludus.dev/ludus/simnode/engine"
)

// ModuleSource fetches a module's bytes by build id (the backend's module store).
type ModuleSource interface {
	FetchModule(ctx context.Context, tenantID, buildID string) ([]byte, error)
}

// Config configures a Node.
type Config struct {
	ID     string
	Region string
	// Addr is the base URL gateways use to reach this node's NodeService.
	Addr string
	// Capacity is how many games the node accepts. Default 64.
	Capacity int
	// Etcd is the cluster state (clusterstate.Dial, or New over ops/etcdserver).
	Etcd *clusterstate.Client
	// LeaseTTL is the node lease's time to live. Default 2 s.
	LeaseTTL time.Duration
	// FlushInterval is the longest an input waits before its log chunk is written.
	// Default 250 ms.
	FlushInterval time.Duration
	// MaxSpeculation bounds how far a game runs ahead of its last durable log
	// chunk: past it the game waits for the log instead of stepping, so a player
	// never sees more than this rolled back when the game moves because its
	// node lost etcd. Default 500 ms; it must exceed FlushInterval.
	MaxSpeculation time.Duration
	// CheckpointEvery is the game time between checkpoints of modules that
	// export save/load. Default 10 s; negative disables checkpoints.
	CheckpointEvery time.Duration
	// HashEvery is how many ticks apart state hashes are recorded. Default 35.
	HashEvery int
	Engine    *engine.Engine
	Modules   ModuleSource
	// Results receives interim progress and final results (nil: not reported).
	Results ResultReporter
	// NodeCredential is this node's own credential (auth/clustercred.Node):
	// the least-privilege way to run a node. Callers (gateways, fleet control)
	// present the gateway-to-node credential derived from it.
	NodeCredential string
	// Clock times each game's tick schedule, the abandon grace and the idle
	// end; default the system clock (tests inject one).
	Clock clock.Clock
	// AbandonGrace is how long a player's slot may have no stream attached
	// (no StreamFrames or Play of the player) before the player leaves the
	// match: a leave event in its log. Default 30 s; negative disables.
	AbandonGrace time.Duration
	// IdleEnd is how long a game may have no player (none joined yet, or all
	// left or abandoned; bots do not count) before it ends, with the message
	// "ended: no players for 60 s". Default 60 s; negative disables.
	IdleEnd time.Duration
	// ClusterToken is the older, all-powerful way: a node holding it accepts the
	// raw token from callers, and derives its own credential from it. Give
	// NodeCredential instead wherever the node runs tenants' modules.
	ClusterToken string
	Logger       *slog.Logger

	// Isolation of each match (docs/RATIONALE.md). One node-wide value for now;
	// per-tenant quotas would pick these per game (engine.InstanceOptions are
	// per instance, and warm pools are kept per options).

	// MemoryLimitPages caps each match's linear memory, in 64 KiB pages. Default
	// 512 (32 MiB); it cannot exceed the engine's engine.Config.MemoryLimitPages.
	MemoryLimitPages uint32
	// CallDeadline bounds each call into a match's module (step, view, state
	// hash) in CPU time of the guest's thread (engine.Config.CallDeadline): a
	// call using more fails the match with "exceeded its CPU deadline".
	// Default 100 ms (a 35 Hz tick is 28.6 ms).
	CallDeadline time.Duration
	// MaxGameInputBytes bounds the inputs a game logs on this node, and each
	// player's share of them (inputs.go). Default DefaultMaxGameInputBytes.
	MaxGameInputBytes int
	// MaxViewBytes bounds what a module's ludus_view may return: a view is
	// copied for each of its streams and sent every frame. A larger one
	// fails the match, saying so. Default DefaultMaxViewBytes.
	MaxViewBytes int
	// WarmInstances is the fewest pre-instantiated instances the node keeps
	// per build once a build has been used, so starting a match does not pay
	// instantiation; a build's pool grows with its recent demand up to
	// WarmInstancesMax (warmpool.go). Default 2; negative disables warm pools.
	WarmInstances int
	// WarmInstancesMax caps each build's warm pool. Default 16.
	WarmInstancesMax int

	// Scheduling (docs/RATIONALE.md).

	// Workers is how many games may tick at once. Default GOMAXPROCS.
	Workers int
	// FrameDropLateness: a tick that starts later than this after its scheduled
	// time renders no views (ludus_frames_dropped_total), so an overloaded node
	// sheds frames before it delays ticks. Default 5 ms.
	FrameDropLateness time.Duration
	// Metrics is the registry the node's collectors are registered on (with a
	// node label) and that GET /metrics serves. Default: a registry of its own.
	Metrics *prometheus.Registry
}

// Node is one sim node.
type Node struct {
	cfg     Config
	log     *slog.Logger
	writer  *logWriter
	sched   *scheduler
	metrics *nodeMetrics
	warm    *warmDemand
	// guestLogTab holds the guest logs of the node's games and of games that
	// left it recently (guestlog.go); resultTab the final results it read
	// and has not archived yet (report.go).
	guestLogTab *guestLogTable
	resultTab   *resultTable

	games    sync.Map // gameKey -> *game
	resuming sync.Map // gameKey -> true while a claim or adoption is under way
	count    atomic.Int32
	// fromCheckpoint counts games resumed from a checkpoint (observability, tests).
	fromCheckpoint atomic.Int64
	// reclaims counts claims of an older lease moved to the current one (tests).
	reclaims atomic.Int64
	draining atomic.Bool
	// resumeBudget is how long a resume of a log of ticks may take
	// (defaultResumeBudget); a test shortens it before Start.
	resumeBudget func(ticks int64, tickRate int) time.Duration

	drained     chan struct{}
	drainedOnce sync.Once

	// replicas are the spectator replicas this node runs for games it does
	// not own (replica.go).
	replicasMu sync.Mutex
	replicas   map[string]*replica

	// sess is the current lease. When a lease is lost every game claimed under
	// it stops, and the node registers again under a fresh lease.
	sess atomic.Pointer[clusterstate.Session]
	// fenced are the node's earlier sessions, fenced and replaced and not
	// revoked yet. The etcd client goes on renewing their leases, so that
	// the node can move the claims still bound to them to its current lease
	// (Reclaim) rather than move their games; fencedLeaseGrace after the
	// node registered again each is revoked (retire), and Close revokes the
	// rest. Left alone they were renewed for as long as the node ran, one
	// more lease with each fence, and a game the node did not reclaim (it
	// was full, or draining) stayed claimed under one, run by no node.
	fencedMu         sync.Mutex
	fenced           []*clusterstate.Session
	fencedLeaseGrace time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and returns a node that is not yet registered.
func New(cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.Etcd == nil || cfg.Engine == nil || cfg.Modules == nil {
		return nil, errors.New("simnode: ID, Etcd, Engine and Modules are required")
	}
	switch {
	case cfg.NodeCredential != "":
		if id, ok := clustercred.ParseNode(cfg.NodeCredential); !ok || id != cfg.ID {
			return nil, fmt.Errorf("simnode: the node credential is not one for node %q: derive it with \"ludus ctl node credential %s\"", cfg.ID, cfg.ID)
		}
	case cfg.ClusterToken != "":
		cred, err := clustercred.Node(cfg.ClusterToken, cfg.ID)
		if err != nil {
			return nil, fmt.Errorf("simnode: %w", err)
		}
		cfg.NodeCredential = cred
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 64
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 250 * time.Millisecond
	}
	if cfg.MaxSpeculation <= 0 {
		cfg.MaxSpeculation = 500 * time.Millisecond
	}
	if cfg.MaxSpeculation <= cfg.FlushInterval {
		return nil, fmt.Errorf("simnode: MaxSpeculation (%v) must exceed FlushInterval (%v)", cfg.MaxSpeculation, cfg.FlushInterval)
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 10 * time.Second
	}
	if cfg.AbandonGrace == 0 {
		cfg.AbandonGrace = 30 * time.Second
	}
	if cfg.IdleEnd == 0 {
		cfg.IdleEnd = 60 * time.Second
	}
	if cfg.HashEvery <= 0 {
		cfg.HashEvery = 35
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = 512
	}
	if cfg.CallDeadline <= 0 {
		cfg.CallDeadline = 100 * time.Millisecond
	}
	if cfg.MaxGameInputBytes <= 0 {
		cfg.MaxGameInputBytes = DefaultMaxGameInputBytes
	}
	if cfg.MaxViewBytes <= 0 {
		cfg.MaxViewBytes = DefaultMaxViewBytes
	}
	if cfg.WarmInstances == 0 {
		cfg.WarmInstances = 2
	}
	if cfg.WarmInstancesMax <= 0 {
		cfg.WarmInstancesMax = 16
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.FrameDropLateness <= 0 {
		cfg.FrameDropLateness = 5 * time.Millisecond
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), drained: make(chan struct{}), replicas: map[string]*replica{}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.resumeBudget = defaultResumeBudget
	n.fencedLeaseGrace = max(3*cfg.LeaseTTL, time.Minute)
	n.writer = newLogWriter(n)
	n.warm = newWarmDemand(cfg.WarmInstances, cfg.WarmInstancesMax)
	n.guestLogTab, n.resultTab = newGuestLogTable(), newResultTable()
	n.sched = newScheduler(cfg.Workers)
	n.metrics = newNodeMetrics(n, cfg.Metrics)
	go n.sched.run(n.ctx)
	return n, nil
}

// ID returns the node id.
func (n *Node) ID() string { return n.cfg.ID }

// Start grants the node's lease, registers the node and starts the lease
// watchdog, the heartbeat and the log writer.
func (n *Node) Start(ctx context.Context) error {
	sess, err := n.newSession(ctx)
	if err != nil {
		return err
	}
	n.sess.Store(sess)
	n.wg.Add(6)
	go n.maintain()
	go n.writer.run()
	go n.heartbeat()
	go n.watchOwners()
	go n.watchDrain()
	go n.releaseModules()
	n.startUsage()
	n.log.Info("sim node registered", "addr", n.cfg.Addr, "lease_ttl_s", sess.TTL().Seconds())
	return nil
}

func (n *Node) newSession(ctx context.Context) (*clusterstate.Session, error) {
	// The keep-alive and the watchdog live as long as the node (n.ctx).
	s, err := n.cfg.Etcd.NewSession(ctx, n.ctx, n.cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	if err := n.publishNode(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// maintain waits for the current session to be fenced (its watchdog saw no
// lease renewal for 2/3 of the TTL, or the keep-alive ended) and registers
// the node again under a new one. Games of the lost lease stay stopped: they
// belong to whoever claims them next.
func (n *Node) maintain() {
	defer n.wg.Done()
	for {
		s := n.sess.Load()
		select {
		case <-n.ctx.Done():
			return // shutting down
		case <-s.Done():
		}
		n.log.Error("sim node fenced itself: stopping every game of its lease", "reason", s.Err())
		n.fencedMu.Lock()
		n.fenced = append(n.fenced, s)
		n.fencedMu.Unlock()
		for {
			if n.ctx.Err() != nil {
				return
			}
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
			ns, err := n.newSession(ctx)
			cancel()
			if err == nil {
				n.sess.Store(ns)
				n.log.Info("sim node registered again under a new lease")
				n.wg.Add(1)
				go n.retire(s)
				break
			}
			n.log.Warn("cannot register under a new lease yet", "err", err)
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(n.cfg.LeaseTTL / 4):
			}
		}
	}
}

// retire revokes a fenced session's lease fencedLeaseGrace after the node
// registered again: long enough for the sweep to reclaim the node's games
// still claimed under it (a replay included); a game not reclaimed by then
// is left for any node to take over. When the node stops first, Close
// revokes it.
func (n *Node) retire(s *clusterstate.Session) {
	defer n.wg.Done()
	select {
	case <-n.ctx.Done():
		return
	case <-time.After(n.fencedLeaseGrace):
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LeaseTTL)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		n.log.Warn("a fenced lease could not be revoked; it is revoked when the node stops", "lease", s.Lease(), "err", err)
		return
	}
	n.fencedMu.Lock()
	defer n.fencedMu.Unlock()
	for i, f := range n.fenced {
		if f == s {
			n.fenced = append(n.fenced[:i], n.fenced[i+1:]...)
			break
		}
	}
}

// ModuleIdle is how long a build the node ran stays compiled after its last
// use (no game, replica, renderer or warm instance of it left): a node runs
// every build its tenants upload and play, one after another as studios
// iterate, and each compiled build holds megabytes. Longer than warmIdle, so
// a build gives back its warm instances first.
const ModuleIdle = engine.DefaultModuleIdle

// releaseModules gives back, once a minute, the warm pools of builds that
// had no start for warmIdle and the compiled builds unused for ModuleIdle,
// and keeps the compilation cache on disk within its bound (PruneCache).
func (n *Node) releaseModules() {
	defer n.wg.Done()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			n.warm.releaseIdle(n.cfg.Clock.Now(), "")
			if ids := n.cfg.Engine.EvictIdle(n.ctx, ModuleIdle); len(ids) > 0 {
				n.log.Info("released builds unused for a while", "builds", len(ids), "idle", ModuleIdle)
			}
			if k, err := n.cfg.Engine.PruneCache(0); err != nil || k > 0 {
				n.log.Info("pruned the compilation cache", "files", k, "err", err)
			}
		}
	}
}

// heartbeat republishes the node's record when its game count or its
// draining flag changes (a drain whose own publish failed is published here).
func (n *Node) heartbeat() {
	defer n.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastDraining := int32(-1), false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			s := n.sess.Load()
			c, d := n.count.Load(), n.draining.Load()
			if (c != last || d != lastDraining) && !s.Fenced() {
				if err := n.publishNode(n.ctx, s); err == nil {
					last, lastDraining = c, d
				}
			}
		}
	}
}

func (n *Node) publishNode(ctx context.Context, s *clusterstate.Session) error {
	info := clusterstate.NodeInfo{ID: n.cfg.ID, Addr: n.cfg.Addr, Region: n.cfg.Region,
		Capacity: n.cfg.Capacity, Games: int(n.count.Load()), Draining: n.draining.Load()}
	if err := n.cfg.Etcd.PublishNode(ctx, s, info); err != nil {
		return fmt.Errorf("simnode: register node: %w", err)
	}
	return nil
}

// Close stops every game (each ends as failed, "node shutting down"), the
// writer and the lease. To keep the games, Drain first (--drain-on-term).
func (n *Node) Close(ctx context.Context) error {
	n.games.Range(func(_, v any) bool {
		v.(*game).stop(reasonNodeStopping)
		return true
	})
	n.games.Range(func(_, v any) bool {
		<-v.(*game).done
		return true
	})
	n.cancel()
	n.wg.Wait()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n.fencedMu.Lock()
	sessions := append(append([]*clusterstate.Session(nil), n.fenced...), n.sess.Load())
	n.fencedMu.Unlock()
	for _, s := range sessions {
		if s != nil {
			_ = s.Close(rctx)
		}
	}
	return nil
}

// Handler serves NodeService to gateways, behind the cluster token, and the
// node's Prometheus metrics at GET /metrics (no token: bind the node's address
// to the cluster network).
func (n *Node) Handler() http.Handler {
	auth := connect.WithInterceptors(clusterAuth(n.cfg.NodeCredential, n.cfg.ClusterToken))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", n.metrics.handler())
	mux.Handle(clusterv1connect.NewNodeServiceHandler(&service{n: n}, auth))
	mux.Handle(clusterv1connect.NewNodeControlServiceHandler(&control{n: n}, auth))
	return mux
}

func gameKey(tenant, game string) string { return tenant + "/" + game }

func (n *Node) game(tenant, id string) (*game, bool) {
	v, ok := n.games.Load(gameKey(tenant, id))
	if !ok {
		return nil, false
	}
	return v.(*game), true
}

// clusterAuth checks the shared cluster token on every call, unary or streaming.
func clusterAuth(nodeCredential, clusterToken string) connect.Interceptor {
	t := &tokenInterceptor{nodeCredential: nodeCredential}
	if clusterToken != "" {
		h := bearer.HashOf(clusterToken)
		t.clusterHash = &h
	}
	return t
}

// tokenInterceptor admits callers presenting this node's gateway-to-node
// credential or, for a node started with it, the cluster token.
type tokenInterceptor struct {
	nodeCredential string
	clusterHash    *[32]byte
}

func (t *tokenInterceptor) check(h http.Header) error {
	got, ok := bearer.FromHeader(h)
	if !ok {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("missing credential: send the gateway-to-node credential of this node"))
	}
	if (t.nodeCredential != "" && clustercred.VerifyToNode(t.nodeCredential, got)) || bearer.Matches(got, t.clusterHash) {
		return nil
	}
	return connect.NewError(connect.CodeUnauthenticated, errors.New("wrong credential: not this node's gateway-to-node credential"))
}

func (t *tokenInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := t.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (t *tokenInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t *tokenInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := t.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}
