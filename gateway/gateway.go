// Package gateway is the Connect-RPC edge players talk to. It serves the
// GameService over Connect, gRPC and gRPC-Web on one port (HTTP/1.1 and h2c, or
// HTTP/1.1 and HTTP/2 over TLS), with gRPC health, server reflection, CORS for
// configured browser origins and per-account limits; its Prometheus metrics
// are served apart, on an operator listener (OperatorHandler). It verifies the
// session ticket of every call locally against the backend's published key
// set, finds each game's owner node in etcd and forwards calls and frame
// streams to it. AuthService, AdminService, FleetService and
// ProgressionService calls and the key set are passed through to the backend
// (passthrough.go, with a body limit per procedure) so browsers need only one
// origin. Every request body is under GuardBodies (guard.go).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/cors"
	"golang.org/x/sync/singleflight"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/matchmaker"
)

// Verifier checks session tickets (auth.Verifier).
type Verifier interface {
	Verify(ctx context.Context, ticket string) (*auth.Claims, error)
}

// Config configures a Gateway.
type Config struct {
	// Etcd is the cluster state (clusterstate.Dial): the gateway watches it
	// for nodes and owners and reads it only to list games or look up one it
	// does not know.
	Etcd *clusterstate.Client
	// Verifier checks tickets; typically auth.NewVerifier over a JWKSClient.
	Verifier Verifier
	// BackendURL is the backend's base URL (h2c or HTTP/1.1).
	BackendURL string
	// ClusterToken authenticates the gateway to sim nodes and the module store.
	ClusterToken string
	// Web, if set, serves everything that is not an RPC (the browser client).
	Web    http.Handler
	Logger *slog.Logger
	// CORSOrigins are the browser origins (e.g. "https://play.example.com", or
	// "*" for any) allowed to call the gateway from pages they serve. Empty: no
	// CORS headers, only same-origin pages (the embedded web UI) can call.
	CORSOrigins []string
	// Limits; zero fields take DefaultLimits.
	Limits Limits
	// Admission enforces tenants' quotas on new games, created (CreateGame)
	// or matched (the matchmaker's allocation) (admission.go;
	// NewBackendAdmission asks the backend). Nil: no quotas are enforced.
	Admission *Admission
	// Registry receives the gateway's metrics, served at GET /metrics by
	// OperatorHandler (not by Handler). Nil: a new registry with the Go and
	// process collectors (NewRegistry).
	Registry *prometheus.Registry
	// Clock times the stream path: the re-attach budget and backoff, the
	// upstream silence watchdog and the retry budget of calls to a moving
	// game. Nil: the system clock.
	Clock Clock
	// Region is the region this gateway serves, told to clients by Ping
	// (default "local", as sim nodes').
	Region string
	// Matchmaking makes the gateway a matchmaker replica: it serves
	// MatchmakingService to players and takes its turn leading queues
	// (matchmaking.go). Call Close to leave.
	Matchmaking bool
}

// Gateway routes players to their games.
type Gateway struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	fleet *clusterstate.View
	// dir is where games run, from a watch of etcd (directory.go).
	dir *directory
	// lobby shares ListGames' reads of etcd among concurrent calls (lobby.go).
	lobby *lobbyReads
	// moduleBytes caches modules served to players (modules.go).
	moduleBytes *moduleCache
	// moduleFetch shares a module's fetch among the requests that miss the
	// cache at once; fetches limits each account's misses (modules.go).
	moduleFetch singleflight.Group
	fetches     *accountLimiter
	modules     clusterv1connect.ModuleStoreServiceClient
	h2c         *http.Client
	limits      Limits
	valid       *validator
	streams     streamCounter
	inputs      *accountLimiter
	// searches limits each account's MatchmakingService calls.
	searches *accountLimiter
	// creations limits each account's CreateGame calls, joins its JoinGame
	// calls.
	creations *accountLimiter
	joins     *accountLimiter
	metrics   *metrics
	health    *grpchealth.StaticChecker

	mu    sync.Mutex
	nodes map[string]clusterv1connect.NodeServiceClient // by address
	// recent holds this gateway's placements of the last two seconds, by node.
	recent []placementRecord

	mm *matchmaker.Matchmaker // nil unless Config.Matchmaking
}

type placementRecord struct {
	node string
	at   time.Time
}

// placed records a game placed on node.
func (g *Gateway) placed(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent = append(g.recent, placementRecord{node, time.Now()})
}

// recentPlacements counts this gateway's placements on node that the node's
// published record may not show yet.
func (g *Gateway) recentPlacements(node string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	cut := time.Now().Add(-2 * time.Second)
	kept := g.recent[:0]
	n := 0
	for _, p := range g.recent {
		if p.at.After(cut) {
			kept = append(kept, p)
			if p.node == node {
				n++
			}
		}
	}
	g.recent = kept
	return n
}

// New returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Etcd == nil || cfg.Verifier == nil || cfg.BackendURL == "" {
		return nil, errors.New("gateway: Etcd, Verifier and BackendURL are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	limits := cfg.Limits.withDefaults()
	valid, err := newValidator()
	if err != nil {
		return nil, fmt.Errorf("gateway: request validator: %w", err)
	}
	g := &Gateway{
		valid:       valid,
		cfg:         cfg,
		clock:       cfg.Clock,
		log:         cfg.Logger.With("role", "gateway"),
		fleet:       cfg.Etcd.View(),
		moduleBytes: newModuleCache(),
		h2c:         &http.Client{Transport: nodeTransport()},
		nodes:       map[string]clusterv1connect.NodeServiceClient{},
		limits:      limits,
		streams:     streamCounter{max: limits.MaxStreamsPerAccount},
		inputs:      newInputLimiter(limits.InputsPerSecond, limits.InputBurst),
		searches:    newAccountLimiter("matchmaking calls", limits.MatchmakingCallsPerSecond, limits.MatchmakingBurst),
		creations:   newAccountLimiter("games", limits.GamesPerMinute/60, limits.GamesBurst).statedPerMinute(),
		joins:       newAccountLimiter("joins", limits.JoinsPerMinute/60, limits.JoinsBurst).statedPerMinute(),
		fetches:     newAccountLimiter("module downloads", moduleDownloadsPerMinute/60, moduleDownloadBurst).statedPerMinute(),
		metrics:     newMetrics(cfg.Registry),
		health:      grpchealth.NewStaticChecker(ludusv1connect.GameServiceName, ludusv1connect.AuthServiceName),
	}
	g.dir = newDirectory(cfg.Etcd, g.metrics.etcdReads)
	g.lobby = newLobbyReads(func(ctx context.Context, tenant string) ([]clusterstate.Game, error) {
		g.metrics.etcdReads.Inc()
		return g.fleet.Games(ctx, tenant)
	})
	g.modules = clusterv1connect.NewModuleStoreServiceClient(g.h2c, cfg.BackendURL,
		connect.WithInterceptors(bearer.Token(cfg.ClusterToken)))
	if cfg.Matchmaking {
		if g.mm, err = g.startMatchmaking(cfg.Etcd); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Close stops what the gateway runs in the background: its matchmaker replica
// (its players' searches end; its tickets leave the queues).
func (g *Gateway) Close() error {
	if g.mm != nil {
		return g.mm.Close()
	}
	return nil
}

// H2CTransport returns a transport that speaks HTTP/2 without TLS (prior
// knowledge) to cluster-internal services, so streams and trailers pass intact.
func H2CTransport() *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p, ForceAttemptHTTP2: true}
}

// nodeStreamWindow is the HTTP/2 receive window of each stream from a sim node:
// about two arena frames. A stream whose client is slow stops reading its
// upstream; with a small window the node soon sees it blocked and skips frames
// for it (always sending the newest), instead of the gateway buffering seconds
// of stale frames (HTTP/2's default 4 MiB) per slow stream.
const nodeStreamWindow = 128 << 10

// nodeTransport is H2CTransport with a small per-stream receive window; the
// connection's window stays large so slow streams never block other streams.
func nodeTransport() *http.Transport {
	t := H2CTransport()
	t.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: nodeStreamWindow}
	return t
}

// Registry is the registry of the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.cfg.Registry }

// SetServing sets what the gRPC health service reports for the gateway's
// services (and the server as a whole, ""); set it false while draining.
func (g *Gateway) SetServing(ok bool) {
	st := grpchealth.StatusServing
	if !ok {
		st = grpchealth.StatusNotServing
	}
	for _, s := range []string{"", ludusv1connect.GameServiceName, ludusv1connect.AuthServiceName} {
		g.health.SetStatus(s, st)
	}
}

// Handler serves the player port: the GameService, gRPC health and
// reflection, the pass-through to the backend (AuthService, AdminService,
// FleetService, ProgressionService, the key set), game modules and the web UI,
// behind CORS if origins are set. Everything sits behind GuardBodies (body
// read deadline, envelope framing). It serves no metrics: those are labelled
// by tenant, and OperatorHandler serves them on a listener of their own.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := ludusv1connect.NewGameServiceHandler(&gameService{g: g},
		// Tickets first (an unauthenticated caller learns nothing about the
		// API's rules), then the rules declared in the protos.
		connect.WithInterceptors(&ticketInterceptor{v: g.cfg.Verifier}, g.valid),
		connect.WithReadMaxBytes(g.limits.MaxMessageBytes))
	// A unary (or server-streaming) request is one message: its body need not
	// be read further than that, even to discard it.
	h = limitBodies(h, int64(g.limits.MaxMessageBytes)+bodySlack)
	mux.Handle(path, h)
	mux.Handle(ludusv1connect.GameServicePlayProcedure, needHTTP2(h))
	hpath, hh := grpchealth.NewHandler(g.health, connect.WithReadMaxBytes(4<<10))
	mux.Handle(hpath, limitBodies(hh, 4<<10+bodySlack))
	reflector := grpcreflect.NewStaticReflector(
		ludusv1connect.GameServiceName, ludusv1connect.AuthServiceName, ludusv1connect.AdminServiceName,
		ludusv1connect.FleetServiceName, ludusv1connect.ProgressionServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, connect.WithReadMaxBytes(64<<10)))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connect.WithReadMaxBytes(64<<10)))
	mux.HandleFunc("GET "+modulePathPrefix, g.serveModule)
	if g.mm != nil {
		mux.Handle(g.matchmakingHandler(g.mm))
	}

	proxy := g.passThrough()
	for _, p := range passThroughPrefixes {
		mux.Handle(p, proxy)
	}
	if g.cfg.Web != nil {
		mux.Handle("/", g.cfg.Web)
	}
	var out http.Handler = mux
	if len(g.cfg.CORSOrigins) > 0 {
		out = withCORS(mux, g.cfg.CORSOrigins)
	}
	return GuardBodies(out, g.limits.BodyReadTimeout)
}

// OperatorHandler serves what only operators may see: the gateway's
// Prometheus metrics at GET /metrics (series labelled by tenant). Serve it on
// a listener of its own (`ludus gateway --metrics-addr`), never on the player
// port.
func (g *Gateway) OperatorHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(g.cfg.Registry))
	return mux
}

// bodySlack is what a request body may hold beyond its one message: the
// envelope prefix, and gzip's overhead on an incompressible message.
const bodySlack = 16 << 10

// limitBodies cuts the body of every call to h that is not client-streaming
// at n bytes (connect-go then answers ResourceExhausted): connect-go reads a
// message announced larger than its limit to the end to discard it, which
// would let a caller without a ticket send any amount.
func limitBodies(h http.Handler, n int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !clientStreaming(r.URL.Path) {
			r.Body = http.MaxBytesReader(w, r.Body, n)
		}
		h.ServeHTTP(w, r)
	})
}

// withCORS lets pages of origins call every RPC with the Connect and gRPC-Web
// protocols, reading their status headers and trailers.
func withCORS(h http.Handler, origins []string) http.Handler {
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: connectcors.AllowedMethods(),
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization", "Grpc-Accept-Encoding", "Connect-Accept-Encoding", "Connect-Content-Encoding", "Content-Encoding"),
		ExposedHeaders: append(connectcors.ExposedHeaders(), "Grpc-Encoding", "Grpc-Accept-Encoding", "Connect-Accept-Encoding", "Connect-Content-Encoding", "Content-Encoding", "Trailer-Grpc-Status", "Trailer-Grpc-Message"),
		MaxAge:         7200,
	}).Handler(h)
}

// needHTTP2 refuses a bidirectional stream over HTTP/1.1 with a message saying
// what to do; connect-go alone answers a bare 505.
func needHTTP2(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusHTTPVersionNotSupported)
			_, _ = strings.NewReader("GameService.Play is a bidirectional stream and needs HTTP/2 (h2c, or TLS with ALPN h2); " +
				"over HTTP/1.1 use StreamFrames and SendInput\n").WriteTo(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// node returns a client for node n, presenting the credential derived for
// that node (auth/clustercred), so the node never needs the cluster token.
func (g *Gateway) node(n clusterstate.NodeInfo) clusterv1connect.NodeServiceClient {
	key := n.ID + "\x00" + n.Addr
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.nodes[key]
	if !ok {
		cred, err := clustercred.GatewayToNode(g.cfg.ClusterToken, n.ID)
		if err != nil {
			// Not a valid node id (etcd holds only valid ones) or no cluster
			// token: the node will refuse the call, Unauthenticated.
			cred = ""
		}
		// No gzip between gateway and node: it would cost the node a compression
		// of every frame for every stream, and compressed frames fill the stream's
		// window slowly, so a slow stream would buffer many stale frames.
		c = clusterv1connect.NewNodeServiceClient(g.h2c, n.Addr, connect.WithInterceptors(bearer.Token(cred)),
			connect.WithAcceptCompression("gzip", nil, nil))
		g.nodes[key] = c
	}
	return c
}
