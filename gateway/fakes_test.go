package gateway

// An in-memory harness for the gateway: a real embedded etcd, fake sim nodes
// (clusterv1connect.NodeServiceHandler) and a fake backend module store, each
// served over h2c on 127.0.0.1 behind the cluster token, a fake ticket
// verifier, and the gateway itself served on a loopback h2c server. Tests
// drive it with the generated GameService client. Used by the *_fake_test.go
// files.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/ops/etcdserver"
)

// The documented timings (docs/API.md "Error codes", docs/ARCHITECTURE.md
// "Re-attach"), checked against the gateway's behaviour rather than against
// its constants.
const (
	documentedRetryBudget = 4 * time.Second // a unary call follows a moving game this long
	documentedSilence     = 3 * time.Second // a frozen upstream is given up after this
)

// fakeClusterToken is the cluster token of every fake.
const fakeClusterToken = "fake-cluster-token"

// Tickets the fake verifier knows: alice, bob and carol play in tenant t1,
// eve in t2.
const (
	ticketAlice = "ticket-alice"
	ticketBob   = "ticket-bob"
	ticketCarol = "ticket-carol"
	ticketEve   = "ticket-eve"
	tenantT1    = "t1"
)

// fakeVerifier maps ticket strings to claims.
type fakeVerifier map[string]*auth.Claims

func (v fakeVerifier) Verify(_ context.Context, ticket string) (*auth.Claims, error) {
	c, ok := v[ticket]
	if !ok {
		return nil, fmt.Errorf("%w: unknown ticket", auth.ErrInvalidTicket)
	}
	cc := *c
	return &cc, nil
}

func newFakeVerifier() fakeVerifier {
	return fakeVerifier{
		ticketAlice: {TenantID: tenantT1, AccountID: "alice", DisplayName: "Alice"},
		ticketBob:   {TenantID: tenantT1, AccountID: "bob", DisplayName: "Bob"},
		ticketCarol: {TenantID: tenantT1, AccountID: "carol", DisplayName: "Carol"},
		ticketEve:   {TenantID: "t2", AccountID: "eve", DisplayName: "Eve"},
	}
}

// h2cClient speaks HTTP/2 without TLS (prior knowledge).
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// serveH2C serves h on a loopback port (HTTP/1.1 and h2c) until the test ends.
func serveH2C(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// requireToken answers 401 to any call without the cluster token and counts it.
func requireToken(h http.Handler, bad *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+fakeClusterToken {
			bad.Add(1)
			http.Error(w, "missing or wrong cluster token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireNodeCredential answers 401 to any call without the gateway-to-node
// credential of node id (never the raw cluster token: a node does not hold it).
func requireNodeCredential(h http.Handler, id string, bad *atomic.Int64) http.Handler {
	want, err := clustercred.GatewayToNode(fakeClusterToken, id)
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+want {
			bad.Add(1)
			http.Error(w, "missing or wrong gateway-to-node credential", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// fakeView is the view a fake node renders at tick: 256 bytes naming the node
// and the tick, the rest zeros (so deltas are small).
func fakeView(node string, tick int64) []byte {
	b := make([]byte, 256)
	copy(b, node)
	binary.LittleEndian.PutUint64(b[32:], uint64(tick))
	return b
}

// viewNode returns the node a fakeView names.
func viewNode(v []byte) string {
	if len(v) < 32 {
		return ""
	}
	return strings.TrimRight(string(v[:32]), "\x00")
}

// Ways a fake node's open frame streams end (fakeNode.endStreams).
const (
	endMoved  = "moved"  // a Status{State: "moved"}, then the stream ends
	endError  = "error"  // the stream fails with Unavailable
	endFreeze = "freeze" // nothing more is sent; the stream stays open
	// endReplaced: Aborted, as a node ends the stream of a player another
	// stream took over.
	endReplaced = "replaced"
	endFailed   = "failed" // a Status{State: "failed", Message: failReason}, then the stream ends
)

// failReason is what a fake node says of a game that failed on it.
const failReason = "module trapped at tick 41: unreachable"

// fakeNode is a sim node. It serves NodeService for the games it owns (own),
// answers NotFound (naming itself and its address, as a careless node would)
// for the others, and records what it receives.
type fakeNode struct {
	clusterv1connect.UnimplementedNodeServiceHandler
	id    string
	url   string
	srv   *httptest.Server
	clock time.Time // tick 1 is at clock; ticks advance every 10 ms
	bad   atomic.Int64

	mu        sync.Mutex
	owned     map[string]bool // tenant/game
	frozen    bool
	streamEnd chan struct{} // closed to end the frame streams open now
	endMode   string
	// Counters and records.
	frameStreams int      // StreamFrames calls served
	inputStreams int      // Inputs streams opened (frozen or not)
	sendInputs   []uint64 // SendInput seqs, in arrival order
	inputs       []uint64 // Inputs seqs, in arrival order (every stream)
	acks         []uint64 // Inputs acks sent, in order
	frameCtl     []string // the controller header of each StreamFrames call
	inputCtl     []string // the controller header of each Inputs stream
	starts       []string // StartGame game ids placed here
	startCalls   int
	// Behaviour.
	sendInputHook   func(ctx context.Context, req *clusterv1.SendInputRequest) (*clusterv1.SendInputResponse, error)
	inputsFailAfter int    // acks after which the Inputs stream fails (0: never)
	onInputsFail    func() // called (once) just before that failure
	inputsRefuse    error  // refuse the first input of every Inputs stream with this
	inputsNoAck     bool   // receive inputs but never acknowledge them
	startErr        error  // StartGame fails with this
	// startHook, if set, is called first by StartGame, without the node's
	// lock: an error is StartGame's answer.
	startHook func(ctx context.Context, req *clusterv1.StartGameRequest) error
}

func (n *fakeNode) tick() int64 { return int64(time.Since(n.clock)/(10*time.Millisecond)) + 1 }

func (n *fakeNode) own(tenant, game string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.owned[tenant+"/"+game] = true
}

func (n *fakeNode) disown(tenant, game string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.owned, tenant+"/"+game)
}

// notHere is what the node answers for a game it does not run: NotFound with
// the node's id and address in the message, which must never reach a player.
func (n *fakeNode) notHere(tenant, game string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.owned[tenant+"/"+game] {
		return nil
	}
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("game %q is not running on node %s at %s", game, n.id, n.url))
}

// endStreams ends every frame stream open now, the way mode says.
func (n *fakeNode) endStreams(mode string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.endMode = mode
	close(n.streamEnd)
	n.streamEnd = make(chan struct{})
}

// freeze makes the node stop answering: open frame streams go silent, new
// calls hang until their caller gives up, open Inputs streams stop acking.
func (n *fakeNode) freeze() {
	n.mu.Lock()
	n.frozen = true
	n.mu.Unlock()
	n.endStreams(endFreeze)
}

func (n *fakeNode) isFrozen() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.frozen
}

// hang blocks a call of a frozen node until its caller gives up.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}

func (n *fakeNode) set(f func(n *fakeNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

func (n *fakeNode) snapshot(f func(n *fakeNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

func (n *fakeNode) gotInputs() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.inputs)
}

func (n *fakeNode) gotSendInputs() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.sendInputs)
}

func (n *fakeNode) StartGame(ctx context.Context, req *connect.Request[clusterv1.StartGameRequest]) (*connect.Response[clusterv1.StartGameResponse], error) {
	if n.isFrozen() {
		return nil, hang(ctx)
	}
	n.mu.Lock()
	hook := n.startHook
	n.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, req.Msg); err != nil {
			n.mu.Lock()
			n.startCalls++
			n.mu.Unlock()
			return nil, err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.startCalls++
	if n.startErr != nil {
		return nil, n.startErr
	}
	n.starts = append(n.starts, req.Msg.GameId)
	n.owned[req.Msg.TenantId+"/"+req.Msg.GameId] = true
	return connect.NewResponse(&clusterv1.StartGameResponse{Game: &ludusv1.GameInfo{
		GameId: req.Msg.GameId, ModuleName: req.Msg.ModuleName, BuildId: req.Msg.BuildId, NodeId: n.id, State: clusterstate.StateRunning}}), nil
}

func (n *fakeNode) GetGame(ctx context.Context, req *connect.Request[clusterv1.GetGameRequest]) (*connect.Response[clusterv1.GetGameResponse], error) {
	if n.isFrozen() {
		return nil, hang(ctx)
	}
	if err := n.notHere(req.Msg.TenantId, req.Msg.GameId); err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterv1.GetGameResponse{Game: &ludusv1.GameInfo{GameId: req.Msg.GameId, NodeId: n.id, State: clusterstate.StateRunning}}), nil
}

func (n *fakeNode) JoinGame(ctx context.Context, req *connect.Request[clusterv1.JoinGameRequest]) (*connect.Response[clusterv1.JoinGameResponse], error) {
	if n.isFrozen() {
		return nil, hang(ctx)
	}
	if err := n.notHere(req.Msg.TenantId, req.Msg.GameId); err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterv1.JoinGameResponse{Slot: 1, Game: &ludusv1.GameInfo{GameId: req.Msg.GameId, NodeId: n.id, State: clusterstate.StateRunning}}), nil
}

func (n *fakeNode) SendInput(ctx context.Context, req *connect.Request[clusterv1.SendInputRequest]) (*connect.Response[clusterv1.SendInputResponse], error) {
	n.mu.Lock()
	hook := n.sendInputHook
	n.mu.Unlock()
	if hook != nil {
		resp, err := hook(ctx, req.Msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(resp), nil
	}
	if n.isFrozen() {
		return nil, hang(ctx)
	}
	if err := n.notHere(req.Msg.TenantId, req.Msg.GameId); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.sendInputs = append(n.sendInputs, req.Msg.Seq)
	n.mu.Unlock()
	return connect.NewResponse(&clusterv1.SendInputResponse{AckedSeq: req.Msg.Seq, Tick: n.tick()}), nil
}

func (n *fakeNode) StreamFrames(ctx context.Context, req *connect.Request[clusterv1.StreamFramesRequest], stream *connect.ServerStream[clusterv1.StreamFramesResponse]) error {
	if n.isFrozen() {
		return hang(ctx)
	}
	if err := n.notHere(req.Msg.TenantId, req.Msg.GameId); err != nil {
		return err
	}
	n.mu.Lock()
	end := n.streamEnd
	n.frameStreams++
	n.frameCtl = append(n.frameCtl, req.Header().Get(controllerHeader))
	n.mu.Unlock()
	if err := stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Status{Status: &ludusv1.Status{
		NodeId: n.id, State: clusterstate.StateRunning, Tick: n.tick(), TickRate: 1000, ViewFormat: "fake"}}}); err != nil {
		return err
	}
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			n.mu.Lock()
			mode := n.endMode
			n.mu.Unlock()
			switch mode {
			case endMoved:
				return stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Status{Status: &ludusv1.Status{
					NodeId: n.id, State: "moved", Message: "handed off"}}})
			case endError:
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %s at %s is shutting down", n.id, n.url))
			case endReplaced:
				return connect.NewError(connect.CodeAborted, errors.New("this player is now controlled from another window"))
			case endFailed:
				return stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Status{Status: &ludusv1.Status{
					NodeId: n.id, State: clusterstate.StateFailed, Tick: n.tick(), Message: failReason}}})
			default: // endFreeze
				<-ctx.Done()
				return nil
			}
		case <-tk.C:
			t := max(n.tick(), last+1)
			last = t
			if err := stream.Send(&clusterv1.StreamFramesResponse{Msg: &clusterv1.StreamFramesResponse_Frame{Frame: &ludusv1.Frame{
				Tick: t, View: fakeView(n.id, t)}}}); err != nil {
				return err
			}
		}
	}
}

func (n *fakeNode) Inputs(ctx context.Context, stream *connect.BidiStream[clusterv1.InputsRequest, clusterv1.InputsResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.inputStreams++
	n.inputCtl = append(n.inputCtl, stream.RequestHeader().Get(controllerHeader))
	n.mu.Unlock()
	if n.isFrozen() {
		return hang(ctx)
	}
	if err := n.notHere(first.TenantId, first.GameId); err != nil {
		return err
	}
	if first.AccountId == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message names the account"))
	}
	m := first
	for {
		if m.Seq > 0 {
			if n.isFrozen() {
				return hang(ctx)
			}
			n.mu.Lock()
			n.inputs = append(n.inputs, m.Seq)
			refuse, noAck := n.inputsRefuse, n.inputsNoAck
			n.mu.Unlock()
			if refuse != nil {
				return refuse
			}
			if !noAck {
				if err := stream.Send(&clusterv1.InputsResponse{AckedSeq: m.Seq, Tick: n.tick()}); err != nil {
					return err
				}
				n.mu.Lock()
				n.acks = append(n.acks, m.Seq)
				fail := n.inputsFailAfter > 0 && len(n.acks) == n.inputsFailAfter
				onFail := n.onInputsFail
				if fail {
					n.onInputsFail = nil
				}
				n.mu.Unlock()
				if fail {
					if onFail != nil {
						onFail()
					}
					return connect.NewError(connect.CodeUnavailable, fmt.Errorf("node %s at %s lost the game", n.id, n.url))
				}
			}
		}
		if m, err = stream.Receive(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// fakeBackend is the backend's ModuleStoreService and key set.
type fakeBackend struct {
	clusterv1connect.UnimplementedModuleStoreServiceHandler
	bad      atomic.Int64
	resolves atomic.Int64
	mints    atomic.Int64
	gets     atomic.Int64
	jwks     atomic.Int64 // key set requests

	mu      sync.Mutex
	rosters map[string][]string // match id → accounts the gateway registered
	// getGate, if set before the gateway starts, holds every GetModule
	// until it is closed.
	getGate chan struct{}
}

func (b *fakeBackend) AddMatchPlayers(_ context.Context, req *connect.Request[clusterv1.AddMatchPlayersRequest]) (*connect.Response[clusterv1.AddMatchPlayersResponse], error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rosters == nil {
		b.rosters = map[string][]string{}
	}
	b.rosters[req.Msg.MatchId] = append(b.rosters[req.Msg.MatchId], req.Msg.AccountIds...)
	return connect.NewResponse(&clusterv1.AddMatchPlayersResponse{}), nil
}

func (b *fakeBackend) roster(match string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.rosters[match]...)
}

const fakeBuildID = "0000000000000000000000000000000000000000000000000000000000000001"

func (b *fakeBackend) ResolveModule(_ context.Context, req *connect.Request[clusterv1.ResolveModuleRequest]) (*connect.Response[clusterv1.ResolveModuleResponse], error) {
	b.resolves.Add(1)
	if req.Msg.Name != "arena" {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("tenant %s has no module %q", req.Msg.TenantId, req.Msg.Name))
	}
	return connect.NewResponse(&clusterv1.ResolveModuleResponse{Module: &ludusv1.Module{
		BuildId: fakeBuildID, Name: req.Msg.Name, AbiVersion: 1, TickRate: 35, MaxPlayers: 8, ViewFormat: "indexed8"}}), nil
}

func (b *fakeBackend) MintMatchCredential(_ context.Context, req *connect.Request[clusterv1.MintMatchCredentialRequest]) (*connect.Response[clusterv1.MintMatchCredentialResponse], error) {
	b.mints.Add(1)
	return connect.NewResponse(&clusterv1.MintMatchCredentialResponse{Credential: "cred-" + req.Msg.MatchId}), nil
}

// fakeWasm is the one module build the fake backend stores, for tenant t1.
var fakeWasm = []byte("\x00asm\x01\x00\x00\x00 fake module")

func fakeWasmBuild() string {
	sum := sha256.Sum256(fakeWasm)
	return hex.EncodeToString(sum[:])
}

func (b *fakeBackend) GetModule(_ context.Context, req *connect.Request[clusterv1.GetModuleRequest]) (*connect.Response[clusterv1.GetModuleResponse], error) {
	b.gets.Add(1)
	if b.getGate != nil {
		<-b.getGate
	}
	if req.Msg.TenantId != tenantT1 || req.Msg.BuildId != fakeWasmBuild() {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("tenant %s has no build %s", req.Msg.TenantId, req.Msg.BuildId))
	}
	return connect.NewResponse(&clusterv1.GetModuleResponse{Module: &ludusv1.Module{BuildId: req.Msg.BuildId, Name: "arena"}, Wasm: fakeWasm}), nil
}

// fakeJWKS is what the fake backend publishes at /.well-known/jwks.json.
const fakeJWKS = `{"keys":[]}`

// fakeCluster is etcd, fake nodes, a fake backend and a gateway.
type fakeCluster struct {
	t       *testing.T
	cli     *clientv3.Client
	backend *fakeBackend
	gw      *Gateway
	url     string // the gateway's base URL
	clock   time.Time
	nodes   map[string]*fakeNode
	claims  atomic.Int64
	over    atomic.Bool // the test is over: etcd writes from stray goroutines are ignored
}

// newFakeCluster starts etcd, the fake backend and a gateway with limits.
func newFakeCluster(t *testing.T, limits Limits) *fakeCluster {
	t.Helper()
	return newFakeClusterClock(t, limits, nil)
}

// newFakeClusterClock is newFakeCluster with the gateway on clk (nil: the
// system clock).
func newFakeClusterClock(t *testing.T, limits Limits, clk Clock) *fakeCluster {
	t.Helper()
	c := &fakeCluster{t: t, cli: testEtcd(t), backend: &fakeBackend{}, clock: time.Now(), nodes: map[string]*fakeNode{}}
	t.Cleanup(func() { c.over.Store(true) }) // before etcd stops
	store := http.NewServeMux()
	store.Handle(clusterv1connect.NewModuleStoreServiceHandler(c.backend))
	mux := http.NewServeMux()
	mux.Handle("/", requireToken(store, &c.backend.bad))
	// The key set is public: players fetch it through the gateway.
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		c.backend.jwks.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, fakeJWKS)
	})
	backendSrv := serveH2C(t, mux)
	gw, err := New(Config{
		Etcd: clusterstate.New(c.cli), Verifier: newFakeVerifier(), BackendURL: backendSrv.URL, ClusterToken: fakeClusterToken,
		Limits: limits, Logger: slog.New(slog.DiscardHandler), Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.gw = gw
	c.url = serveH2C(t, gw.Handler()).URL
	t.Cleanup(func() {
		if n := c.backend.bad.Load(); n > 0 {
			t.Errorf("the backend got %d calls without its gateway-to-node credential", n)
		}
		for _, n := range c.nodes {
			if b := n.bad.Load(); b > 0 {
				t.Errorf("node %s got %d calls without its gateway-to-node credential", n.id, b)
			}
		}
	})
	return c
}

// addNode starts a fake node and registers it in etcd.
func (c *fakeCluster) addNode(info clusterstate.NodeInfo) *fakeNode {
	c.t.Helper()
	n := &fakeNode{id: info.ID, clock: c.clock, owned: map[string]bool{}, streamEnd: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(clusterv1connect.NewNodeServiceHandler(n))
	n.srv = serveH2C(c.t, requireNodeCredential(mux, info.ID, &n.bad))
	n.url = n.srv.URL
	if info.Capacity == 0 {
		info.Capacity = 100
	}
	info.Addr = n.url
	c.put(clusterstate.NodeKey(info.ID), info)
	c.nodes[info.ID] = n
	return n
}

func (c *fakeCluster) put(key string, v any) {
	c.t.Helper()
	var s string
	if str, ok := v.(string); ok {
		s = str
	} else {
		b, err := json.Marshal(v)
		if err != nil {
			c.t.Fatal(err)
		}
		s = string(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.cli.Put(ctx, key, s); err != nil && !c.over.Load() {
		c.t.Error(err) // Error, not Fatal: also called from node goroutines
	}
}

func (c *fakeCluster) del(key string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.cli.Delete(ctx, key); err != nil && !c.over.Load() {
		c.t.Error(err)
	}
}

// addGame writes a running game's spec and status and, if owner is set, makes
// that node its owner.
func (c *fakeCluster) addGame(tenant, game, owner string) {
	c.t.Helper()
	c.put(clusterstate.GameKey(tenant, game), clusterstate.GameSpec{TenantID: tenant, GameID: game, ModuleName: "arena", BuildID: fakeBuildID,
		CreatedAt: time.Now(), TickRate: 100, MaxPlayers: 8, FrameDivisor: 1, ViewFormat: "fake"})
	c.put(clusterstate.StatusKey(tenant, game), clusterstate.GameStatus{State: clusterstate.StateRunning, NodeID: owner})
	if owner != "" {
		c.setOwner(tenant, game, owner)
	}
}

// setOwner makes node the game's owner: the node runs it and the owner key
// names it (with a new claim id).
func (c *fakeCluster) setOwner(tenant, game, node string) {
	c.t.Helper()
	c.nodes[node].own(tenant, game)
	c.put(clusterstate.OwnerKey(tenant, game), clusterstate.OwnerValue(node, fmt.Sprintf("claim-%d", c.claims.Add(1))))
}

// moveOwner moves a game from one node to another: the old node stops
// running it, the owner key names the new one.
func (c *fakeCluster) moveOwner(tenant, game, from, to string) {
	c.t.Helper()
	c.nodes[from].disown(tenant, game)
	c.setOwner(tenant, game, to)
}

// failGame is what a node does with a game it claimed but cannot run (a
// resume that desyncs): in one transaction, the game's status becomes
// "failed" with the reason and the owner key goes (clusterstate.Client.Fail).
func (c *fakeCluster) failGame(tenant, game, node, reason string) {
	c.t.Helper()
	st, err := json.Marshal(clusterstate.GameStatus{State: clusterstate.StateFailed, NodeID: node, Tick: 812, Message: reason})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.cli.Txn(ctx).Then(clientv3.OpPut(clusterstate.StatusKey(tenant, game), string(st)),
		clientv3.OpDelete(clusterstate.OwnerKey(tenant, game))).Commit(); err != nil {
		c.t.Fatal(err)
	}
}

// waitOwner waits until the gateway's directory names node as the game's owner.
func (c *fakeCluster) waitOwner(tenant, game, node string) {
	c.t.Helper()
	eventually(c.t, "the directory to name "+node+" as the owner of "+game, func() bool {
		n, ok := c.gw.dir.owner(tenant, game)
		return ok && n.ID == node
	})
}

// waitNodes waits until the gateway's directory lists n nodes.
func (c *fakeCluster) waitNodes(n int) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("the directory to list %d nodes", n), func() bool {
		l, ok := c.gw.dir.nodeList()
		return ok && len(l) == n
	})
}

// client returns a GameService client presenting ticket.
func (c *fakeCluster) client(ticket string) ludusv1connect.GameServiceClient {
	return ludusv1connect.NewGameServiceClient(h2cClient(), c.url, connect.WithInterceptors(bearer.Token(ticket)))
}

// metric returns the sum of a metric's series in the gateway's registry
// (counters and gauges), and whether it was found.
func (c *fakeCluster) metric(name string) (float64, bool) {
	c.t.Helper()
	mfs, err := c.gw.Registry().Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.Metric {
			sum += metricValue(m)
		}
		return sum, true
	}
	return 0, false
}

// metricWith returns one series' value: the one whose labels include want.
func (c *fakeCluster) metricWith(name string, want map[string]string) float64 {
	c.t.Helper()
	mfs, err := c.gw.Registry().Gather()
	if err != nil {
		c.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.Metric {
			for k, v := range want {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			sum += metricValue(m)
		}
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// leaks reports the first of the internals a player must never see in an
// error that msg contains: a node's address, its id, transport details.
func leaks(msg string, nodes ...*fakeNode) string {
	for _, n := range nodes {
		if strings.Contains(msg, n.id) {
			return n.id
		}
	}
	return leaksAddress(msg, nodes...)
}

// leaksAddress is leaks without node ids, which statuses name on purpose
// (node_id, previous_node_id).
func leaksAddress(msg string, nodes ...*fakeNode) string {
	for _, n := range nodes {
		for _, s := range []string{n.url, strings.TrimPrefix(n.url, "http://")} {
			if strings.Contains(msg, s) {
				return s
			}
		}
	}
	for _, s := range []string{"127.0.0.1", "http://", "NodeService", "not running on", "dial tcp", "connection refused"} {
		if strings.Contains(msg, s) {
			return s
		}
	}
	return ""
}

// within fails the test if d is not in [lo, hi].
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Fatalf("%s took %v; want between %v and %v", what, d, lo, hi)
	}
}

// testEtcd starts an embedded etcd for one test and returns a raw client to
// it (tests write keys behind the gateway's back).
func testEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := es.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close(); es.Close() })
	return cli
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
