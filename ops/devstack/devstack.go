// Package devstack starts every Ludus role in one process — embedded etcd, the
// backend on SQLite, sim nodes and the gateway with the web UI — wired exactly as
// separate processes would be (HTTP/2 between roles, the cluster token, the
// published key set). It is `ludus dev`, and the harness of the end-to-end tests.
package devstack

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/backend"
	"ludus.dev/ludus/backend/store/sqlite"
	"ludus.dev/ludus/batch"
	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/matchmaker"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/web"
)

// Config configures a dev stack.
type Config struct {
	// HTTPAddr is where the gateway and web UI listen. Default 127.0.0.1:8080.
	HTTPAddr string
	// DataDir holds etcd's data, the SQLite database, the compilation cache and the
	// operator key. Required.
	DataDir string
	// Nodes is the number of sim nodes. Default 2.
	Nodes int
	// NoFsync makes etcd skip fsync (tests).
	NoFsync bool
	// LeaseTTL of sim nodes. Default 2 s.
	LeaseTTL time.Duration
	// MetricsAddr is the operator listener serving GET /metrics: the gateway's
	// and every sim node's series (labelled by tenant), never served on
	// HTTPAddr. Default 127.0.0.1:0, a free loopback port (Stack.MetricsURL).
	MetricsAddr string
	// Regions, when set, spreads the sim nodes over these regions in turn and
	// runs one gateway per region: the first on HTTPAddr, the others on free
	// loopback ports (Stack.RegionURLs). Default: one region, "local".
	Regions []string
	Logger  *slog.Logger
}

// Stack is a running dev stack.
type Stack struct {
	GatewayURL string
	// RegionURLs maps each region to its gateway's URL (GatewayURL for the first).
	RegionURLs map[string]string
	// MetricsURL is the base URL of the operator listener: GET
	// MetricsURL+"/metrics" returns the gateway's and the sim nodes' metrics.
	MetricsURL  string
	BackendURL  string
	EtcdURL     string
	OperatorKey string
	TenantID    string // the demo tenant
	ArenaBuild  string // build id of the demo arena module
	Etcd        *clusterstate.Client
	Backend     *backend.Server
	Nodes       []*simnode.Node
	Engine      *engine.Engine
	Gateway     *gateway.Gateway

	ClusterToken string // shared secret of the roles: sim nodes' NodeService, module store

	log     *slog.Logger
	closers []func(context.Context)
	ready   atomic.Bool
}

// DemoTenant is the slug of the tenant `ludus dev` creates.
const DemoTenant = "demo"

// Start starts every role and seeds the demo tenant with the arena module. On
// error, whatever started is stopped again.
func Start(ctx context.Context, cfg Config) (s *Stack, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("devstack: DataDir is required")
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 2
	}
	if cfg.MetricsAddr == "" {
		cfg.MetricsAddr = "127.0.0.1:0"
	}
	if len(cfg.Regions) == 0 {
		cfg.Regions = []string{"local"}
	}
	for _, r := range cfg.Regions {
		if !clusterstate.ValidID(r) {
			return nil, fmt.Errorf("devstack: region %q must be 1 to 64 letters, digits, - or _", r)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	s = &Stack{log: cfg.Logger}
	// A failed start stops what it started. The return statements set s to
	// nil first: close the stack itself, not the named result.
	stack := s
	defer func() {
		if err != nil {
			stack.Close(context.Background())
		}
	}()

	// The gateway's port is taken first so that a busy port fails fast.
	gwLn, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	s.GatewayURL = "http://" + gwLn.Addr().String()
	metricsLn, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		gwLn.Close()
		return nil, fmt.Errorf("metrics listener on %s: %w", cfg.MetricsAddr, err)
	}
	s.MetricsURL = "http://" + metricsLn.Addr().String()
	// Until the gateway serves them, whatever is not handed over is closed here.
	defer func() {
		if err != nil {
			metricsLn.Close()
		}
	}()

	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(cfg.DataDir, "etcd"), NoFsync: cfg.NoFsync})
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.closers = append(s.closers, func(context.Context) { es.Close() })
	s.EtcdURL = es.Endpoint
	raw, err := es.Client()
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.Etcd = clusterstate.New(raw)
	s.closers = append(s.closers, func(context.Context) { s.Etcd.Close() })

	s.Engine, err = engine.New(ctx, engine.Config{CacheDir: filepath.Join(cfg.DataDir, "wazero-cache")})
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.closers = append(s.closers, func(ctx context.Context) { s.Engine.Close(ctx) })

	clusterToken := randomToken()
	s.ClusterToken = clusterToken
	s.OperatorKey, err = loadOrCreateSecret(filepath.Join(cfg.DataDir, "operator.key"))
	if err != nil {
		gwLn.Close()
		return nil, err
	}

	// Backend.
	st, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "ludus.db"))
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.closers = append(s.closers, func(context.Context) { st.Close() })
	s.Backend, err = backend.New(ctx, backend.Config{
		Store:          st,
		ClusterToken:   clusterToken,
		OperatorKey:    s.OperatorKey,
		ValidateModule: s.Engine.Validate,
		Fleet:          fleet.Admin{View: s.Etcd.View()},
		Logger:         cfg.Logger.With("role", "backend"),
		RequireRoster:  true,
	})
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	// Webhook deliveries and sweeps run until the stack closes.
	hookCtx, stopHooks := context.WithCancel(context.Background())
	go s.Backend.RunWebhooks(hookCtx, time.Second)
	go s.Backend.RunSweeps(hookCtx, backend.SweepInterval)
	s.closers = append(s.closers, func(context.Context) { stopHooks() })
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	control := &fleet.Control{Etcd: s.Etcd, OperatorKey: s.OperatorKey, ClusterToken: clusterToken, HTTPClient: h2c}
	backendMux := http.NewServeMux()
	backendMux.Handle(control.Handler())
	// Matchmaking rules and batch runs are tenants' admin services hosted
	// beside the backend, authorized by its API keys.
	mmAdmin, err := matchmaker.NewAdminService(s.Etcd, func(ctx context.Context, h http.Header) (string, error) {
		return s.Backend.AuthorizeTenant(ctx, h, "MatchmakingAdminService", true)
	})
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	backendMux.Handle(ludusv1connect.NewMatchmakingAdminServiceHandler(mmAdmin))
	backendMux.Handle((&fleet.GameLogs{Etcd: s.Etcd, ClusterToken: clusterToken, HTTPClient: h2c,
		Authorize: s.Backend.AuthorizeTenant, Store: s.Backend}).Handler())
	backendMux.Handle((&batch.Service{Etcd: s.Etcd, Backend: s.Backend, Engine: s.Engine, Authorize: s.Backend.AuthorizeTenant,
		Logger: cfg.Logger.With("role", "batch")}).Handler(connect.WithReadMaxBytes(1 << 20)))
	backendMux.Handle("/", s.Backend.Handler())
	s.BackendURL, err = s.serve("127.0.0.1:0", gateway.GuardBodies(backendMux, gateway.DefaultBodyReadTimeout))
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.TenantID, err = s.Backend.EnsureTenant(ctx, DemoTenant, "Demo Studio")
	if err != nil {
		gwLn.Close()
		return nil, fmt.Errorf("seed demo tenant: %w", err)
	}
	s.ArenaBuild, err = s.Backend.EnsureModule(ctx, s.TenantID, "arena", builtin.Arena)
	if err != nil {
		gwLn.Close()
		return nil, fmt.Errorf("seed arena module: %w", err)
	}

	// Sim nodes.
	// One registry for every node: their series differ by the node label.
	nodeMetrics := prometheus.NewRegistry()
	for i := 0; i < cfg.Nodes; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			gwLn.Close()
			return nil, err
		}
		id := fmt.Sprintf("node-%d", i+1)
		// Each node holds its own credential, never the cluster token: it can
		// fetch modules and archive games, not mint match credentials.
		nodeCred, err := clustercred.Node(clusterToken, id)
		if err != nil {
			ln.Close()
			gwLn.Close()
			return nil, err
		}
		n, err := simnode.New(simnode.Config{
			ID: id, Region: cfg.Regions[i%len(cfg.Regions)], Addr: "http://" + ln.Addr().String(),
			Etcd: s.Etcd, LeaseTTL: cfg.LeaseTTL, Engine: s.Engine,
			Modules:        simnode.NewModuleStore(h2c, s.BackendURL, nodeCred),
			Results:        simnode.NewBackendReporter(h2c, s.BackendURL),
			NodeCredential: nodeCred,
			Metrics:        nodeMetrics,
			Logger:         cfg.Logger.With("role", "simnode"),
		})
		if err != nil {
			ln.Close()
			gwLn.Close()
			return nil, err
		}
		n.SetUsageSink(backend.NewUsageReporter(h2c, s.BackendURL, nodeCred, id, cfg.Logger)) // quotas and usage
		if err := n.Start(ctx); err != nil {
			ln.Close()
			gwLn.Close()
			return nil, err
		}
		s.Nodes = append(s.Nodes, n)
		s.serveListener(ln, gateway.GuardBodies(n.Handler(), gateway.DefaultBodyReadTimeout))
		s.closers = append(s.closers, func(ctx context.Context) { n.Close(ctx) })
		go func() {
			// A node drained by an operator leaves the fleet, as `ludus simnode` exits.
			<-n.Drained()
			s.log.Info("sim node drained and stopped", "node", n.ID())
			n.Close(context.Background())
		}()
	}

	// Gateway with the web UI.
	jwks := auth.NewJWKSClient(s.BackendURL+"/.well-known/jwks.json", auth.WithHTTPClient(h2c))
	gw, err := gateway.New(gateway.Config{
		Etcd:         s.Etcd,
		Verifier:     auth.NewVerifier(jwks, nil),
		BackendURL:   s.BackendURL,
		ClusterToken: clusterToken,
		Web:          web.Handler(),
		Logger:       cfg.Logger,
		Admission:    gateway.NewBackendAdmission(h2c, s.BackendURL, clusterToken),
		Matchmaking:  true,
		Region:       cfg.Regions[0],
	})
	if err != nil {
		gwLn.Close()
		return nil, err
	}
	s.Gateway = gw
	s.RegionURLs = map[string]string{cfg.Regions[0]: s.GatewayURL}
	// One more gateway per further region, each a matchmaker replica too.
	for _, region := range cfg.Regions[1:] {
		rgw, err := gateway.New(gateway.Config{Etcd: s.Etcd, Verifier: auth.NewVerifier(jwks, nil), BackendURL: s.BackendURL,
			ClusterToken: clusterToken, Web: web.Handler(), Logger: cfg.Logger.With("region", region),
			Admission: gateway.NewBackendAdmission(h2c, s.BackendURL, clusterToken), Matchmaking: true, Region: region})
		if err != nil {
			gwLn.Close()
			return nil, err
		}
		s.closers = append(s.closers, func(context.Context) { rgw.Close() })
		if s.RegionURLs[region], err = s.serve("127.0.0.1:0", rgw.Handler()); err != nil {
			gwLn.Close()
			return nil, err
		}
	}
	s.closers = append(s.closers, func(context.Context) { gw.Close() })
	// "Find match" works out of the box: the demo tenant's arena mode matches
	// two teams of two, bots filling seats after 45 s.
	if err := matchmaker.PutRules(ctx, s.Etcd, s.TenantID, DemoMatchRules(cfg.Regions...)); err != nil {
		gwLn.Close()
		return nil, fmt.Errorf("seed matchmaking rules: %w", err)
	}
	// Batch runs play on this machine at a lower priority than live matches:
	// they pause while a live tick on any of the nodes starts late.
	var lates []*simnode.LiveLateness
	for _, n := range s.Nodes {
		lates = append(lates, n.LiveLateness(0, 0))
	}
	liveLate := func() bool {
		for _, l := range lates {
			if l.Late() {
				return true
			}
		}
		return false
	}
	batchCtx, stopBatch := context.WithCancel(context.Background())
	if _, err := batch.StartWorker(batchCtx, batch.WorkerConfig{ID: "devstack-batch", Etcd: s.Etcd, Backend: s.Backend,
		Engine: s.Engine, LiveLate: liveLate, Logger: cfg.Logger.With("role", "batch")}); err != nil {
		stopBatch()
		gwLn.Close()
		return nil, err
	}
	s.closers = append(s.closers, func(context.Context) { stopBatch() })
	usageCtx, stopUsage := context.WithCancel(context.Background())
	usageDone := make(chan struct{})
	go func() {
		defer close(usageDone)
		gw.RunUsage(usageCtx, backend.NewUsageReporter(h2c, s.BackendURL, clusterToken, "devstack-gateway", cfg.Logger))
	}()
	s.closers = append(s.closers, func(context.Context) { stopUsage(); <-usageDone })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("/", gw.Handler())
	s.serveListener(gwLn, mux)
	// Metrics on their own loopback listener: the player port may be opened to
	// a network (--http 0.0.0.0:8080), and nothing labelled by tenant belongs there.
	om := http.NewServeMux()
	om.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{gw.Registry(), nodeMetrics},
		promhttp.HandlerOpts{EnableOpenMetrics: true}))
	s.serveListener(metricsLn, om)
	s.ready.Store(true)
	s.log.Info("ludus dev is up", "url", s.GatewayURL, "metrics", s.MetricsURL+"/metrics", "tenant", DemoTenant, "arena_build", s.ArenaBuild, "nodes", cfg.Nodes)
	return s, nil
}

// healthz answers 200 when every role is up: etcd answers, every sim node is
// registered and the backend serves its key set.
func (s *Stack) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	fail := func(msg string) { http.Error(w, msg, http.StatusServiceUnavailable) }
	if !s.ready.Load() {
		fail("starting")
		return
	}
	nodes, err := s.Etcd.View().Nodes(ctx)
	if err != nil {
		fail("etcd: " + err.Error())
		return
	}
	if len(nodes) < len(s.Nodes) {
		fail(fmt.Sprintf("%d of %d sim nodes registered", len(nodes), len(s.Nodes)))
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.BackendURL+"/.well-known/jwks.json", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fail("backend: " + err.Error())
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail("backend: " + resp.Status)
		return
	}
	fmt.Fprintf(w, "ok: etcd, backend, %d sim nodes, gateway\n", len(nodes))
}

// serve starts an HTTP server (HTTP/1.1 and h2c) on addr and returns its URL.
func (s *Stack) serve(addr string, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	s.serveListener(ln, h)
	return "http://" + ln.Addr().String(), nil
}

func (s *Stack) serveListener(ln net.Listener, h http.Handler) {
	srv := NewServer(h)
	go srv.Serve(ln)
	s.closers = append(s.closers, func(ctx context.Context) {
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	})
}

// NewServer returns an http.Server that speaks HTTP/1.1 and HTTP/2 without TLS
// (h2c), which gRPC and bidirectional streams need: gateway.NewServer without TLS.
func NewServer(h http.Handler) *http.Server {
	return gateway.NewServer(h, nil)
}

// Close stops every role, newest first, within ctx's deadline.
func (s *Stack) Close(ctx context.Context) {
	s.ready.Store(false)
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i](ctx)
	}
	s.closers = nil
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// loadOrCreateSecret reads a secret from path, creating it on first use.
func loadOrCreateSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	tok := "lds_op_" + randomToken()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

// demoMaxRTT is the RTT limit of the demo rules' regions, in ms. Every
// region of `ludus dev` is on this machine, so a page's RTT measures the
// machine's load, not a distance: a busy machine (a race-detector build, a
// browser beside it) answered pings in 456 ms, and the 250 ms of a real
// deployment refused every search.
const demoMaxRTT = 2000

// DemoMatchRules are the matchmaking rules `ludus dev` seeds for the demo
// tenant's "arena" mode: the field report's band (±100, +50 every 5 s, at most
// ±550), two teams of two, 45 s before bots fill the seats, in every region
// given (default "local") at up to demoMaxRTT.
func DemoMatchRules(regions ...string) *ludusv1.MatchmakingRules {
	if len(regions) == 0 {
		regions = []string{"local"}
	}
	rtt := map[string]int32{}
	for _, r := range regions {
		rtt[r] = demoMaxRTT
	}
	return &ludusv1.MatchmakingRules{Mode: "arena", TeamSize: 2, Teams: 2, BandStart: 100, BandStep: 50,
		BandIntervalMs: 5000, BandCap: 550, MaxWaitMs: 45000, BotsFillAtTimeout: true, MaxRttMs: rtt}
}
