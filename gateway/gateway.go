// Package gateway is the Connect-RPC edge players talk to. It serves the
// GameService over Connect, gRPC and gRPC-Web on one port (HTTP/1.1 and h2c),
// verifies the session ticket of every call locally against the backend's
// published key set, finds each game's owner node in etcd and forwards calls and
// frame streams to it. AuthService calls and the key set are passed through to
// the backend so browsers need only one origin.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/fleet"
)

// Verifier checks session tickets (auth.Verifier).
type Verifier interface {
	Verify(ctx context.Context, ticket string) (*auth.Claims, error)
}

// Config configures a Gateway.
type Config struct {
	Etcd *clientv3.Client
	// Verifier checks tickets; typically auth.NewVerifier over a JWKSClient.
	Verifier Verifier
	// BackendURL is the backend's base URL (h2c or HTTP/1.1).
	BackendURL string
	// ClusterToken authenticates the gateway to sim nodes and the module store.
	ClusterToken string
	// Web, if set, serves everything that is not an RPC (the browser client).
	Web    http.Handler
	Logger *slog.Logger
}

// Gateway routes players to their games.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	fleet   *fleet.View
	modules clusterv1connect.ModuleStoreServiceClient
	h2c     *http.Client

	mu    sync.Mutex
	nodes map[string]clusterv1connect.NodeServiceClient // by address
	// recent holds this gateway's placements of the last two seconds, by node.
	recent []placementRecord
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
	g := &Gateway{
		cfg:   cfg,
		log:   cfg.Logger.With("role", "gateway"),
		fleet: &fleet.View{Client: cfg.Etcd},
		h2c:   &http.Client{Transport: H2CTransport()},
		nodes: map[string]clusterv1connect.NodeServiceClient{},
	}
	g.modules = clusterv1connect.NewModuleStoreServiceClient(g.h2c, cfg.BackendURL,
		connect.WithInterceptors(bearer(cfg.ClusterToken)))
	return g, nil
}

// H2CTransport returns a transport that speaks HTTP/2 without TLS (prior
// knowledge) to cluster-internal services, so streams and trailers pass intact.
func H2CTransport() *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p, ForceAttemptHTTP2: true}
}

// Handler serves the GameService, the pass-through to the backend and the web UI.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := ludusv1connect.NewGameServiceHandler(&gameService{g: g},
		connect.WithInterceptors(&ticketInterceptor{v: g.cfg.Verifier}),
		connect.WithReadMaxBytes(64<<10))
	mux.Handle(path, h)

	backend, _ := url.Parse(g.cfg.BackendURL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.SetXForwarded()
		},
		Transport:     H2CTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.log.Warn("backend unreachable", "path", r.URL.Path, "err", err)
			http.Error(w, "backend unavailable", http.StatusBadGateway)
		},
	}
	mux.Handle("/"+ludusv1connect.AuthServiceName+"/", proxy)
	mux.Handle("/"+ludusv1connect.AdminServiceName+"/", proxy)
	mux.Handle("/"+ludusv1connect.FleetServiceName+"/", proxy)
	mux.Handle("/"+ludusv1connect.ProgressionServiceName+"/", proxy)
	mux.Handle("/.well-known/", proxy)
	if g.cfg.Web != nil {
		mux.Handle("/", g.cfg.Web)
	}
	return mux
}

// node returns a client for the node at addr.
func (g *Gateway) node(addr string) clusterv1connect.NodeServiceClient {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.nodes[addr]
	if !ok {
		c = clusterv1connect.NewNodeServiceClient(g.h2c, addr, connect.WithInterceptors(bearer(g.cfg.ClusterToken)))
		g.nodes[addr] = c
	}
	return c
}

// bearer adds a fixed bearer token to every outgoing call.
func bearer(token string) connect.Interceptor { return bearerInterceptor(token) }

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
