package simnode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"ludus.dev/ludus/internal/bearer"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/simnode/engine"
)

var (
	etcdCli   *clientv3.Client // raw, for tests that poke etcd behind the node's back
	state     *clusterstate.Client
	testEng   *engine.Engine
	arenaID   = engine.BuildID(builtin.Arena)
	pongID    = engine.BuildID(builtin.Pong)
	testToken = "test-cluster-token"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "simnode-test")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	es, err := etcdserver.Start(ctx, etcdserver.Config{Dir: dir + "/etcd", NoFsync: true})
	if err != nil {
		panic(err)
	}
	etcdCli, err = es.Client()
	if err != nil {
		panic(err)
	}
	state = clusterstate.New(etcdCli)
	testEng, err = engine.New(ctx, engine.Config{CacheDir: testenv.WazeroCacheDir()})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	testEng.Close(ctx)
	etcdCli.Close()
	es.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// staticModules serves the builtin arena: the module store is the backend's job
// and is tested there; here it only isolates the node.
type staticModules struct{}

func (staticModules) FetchModule(_ context.Context, _, buildID string) ([]byte, error) {
	switch buildID {
	case arenaID:
		return builtin.Arena, nil
	case pongID:
		return builtin.Pong, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no module %s", buildID))
}

func startNode(t *testing.T, id string) (*Node, clusterv1connect.NodeServiceClient) {
	t.Helper()
	// A 3 s lease: long enough that a loaded CI machine running -race does not
	// lose it by accident, short enough for failover tests.
	return startNodeOn(t, id, state, 3*time.Second)
}

// startNodeOn starts a node on the given etcd client with the given lease TTL.
func startNodeOn(t *testing.T, id string, cli *clusterstate.Client, ttl time.Duration) (*Node, clusterv1connect.NodeServiceClient) {
	t.Helper()
	return startNodeIn(t, id, "", cli, ttl)
}

// startNodeIn starts a node of region ("": the default) on cli.
func startNodeIn(t *testing.T, id, region string, cli *clusterstate.Client, ttl time.Duration) (*Node, clusterv1connect.NodeServiceClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{ID: id, Region: region, Addr: "http://" + ln.Addr().String(), Etcd: cli, Engine: testEng, Modules: staticModules{}, LeaseTTL: ttl, CheckpointEvery: time.Second,
		// These tests watch frames; on a machine loaded by other test binaries
		// (-race) ticks start late, and the node's default would shed every
		// frame. Shedding is the isolation test's subject, not theirs.
		FrameDropLateness: 200 * time.Millisecond,
		ClusterToken:      testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(n.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	// HTTP/2 without TLS, as gateways speak to nodes (bidirectional streams).
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close(context.Background())
	})
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: h2c}}
	return n, clusterv1connect.NewNodeServiceClient(client, srv.URL, connect.WithInterceptors(bearer.Token(testToken)))
}

var gameSeq int

func createGame(t *testing.T, c clusterv1connect.NodeServiceClient, tenant string, bots int) string {
	t.Helper()
	gameSeq++
	id := fmt.Sprintf("g%d-%d", gameSeq, time.Now().UnixNano())
	_, err := c.StartGame(context.Background(), connect.NewRequest(&clusterv1.StartGameRequest{
		TenantId: tenant, GameId: id, BuildId: arenaID, Seed: 99, Config: []byte(fmt.Sprintf(`{"bots":%d}`, bots))}))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPlayAndReplay(t *testing.T) {
	_, c := startNode(t, "n-play")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := createGame(t, c, "tenant-a", 3)
	join, err := c.JoinGame(ctx, connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1", DisplayName: "ada"}))
	if err != nil {
		t.Fatal(err)
	}
	if join.Msg.Slot != 0 {
		t.Fatalf("first human got slot %d, want 0", join.Msg.Slot)
	}
	again, err := c.JoinGame(ctx, connect.NewRequest(&clusterv1.JoinGameRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1"}))
	if err != nil || again.Msg.Slot != 0 {
		t.Fatalf("rejoin: slot %v err %v; want the same slot", again, err)
	}

	stream, err := c.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	frames := 0
	for frames < 10 && stream.Receive() {
		if stream.Msg().GetFrame() != nil {
			frames++
		}
	}
	if frames < 10 {
		t.Fatalf("got %d frames: %v", frames, stream.Err())
	}

	// Inputs are acknowledged once durable; a re-sent seq is acknowledged, not re-applied.
	for seq := uint64(1); seq <= 5; seq++ {
		resp, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1", Seq: seq, Payload: []byte{byte(seq)}}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.AckedSeq != seq {
			t.Fatalf("acked %d, want %d", resp.Msg.AckedSeq, seq)
		}
	}
	if _, err := c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1", Seq: 3, Payload: []byte{9}})); err != nil {
		t.Fatal(err)
	}

	// Bad inputs are refused with the right codes.
	_, err = c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: "tenant-a", GameId: id, AccountId: "stranger", Seq: 1, Payload: []byte{1}}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	_, err = c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: "tenant-a", GameId: id, AccountId: "acc-1", Seq: 6, Payload: make([]byte, 300)}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.SendInput(ctx, connect.NewRequest(&clusterv1.SendInputRequest{TenantId: "tenant-b", GameId: id, AccountId: "acc-1", Seq: 6, Payload: []byte{1}}))
	wantCode(t, err, connect.CodeNotFound)

	// The durable log replays to the hashes the owner recorded, and holds every
	// acknowledged input exactly once.
	time.Sleep(600 * time.Millisecond)
	spec, chunks, err := ReadLog(ctx, state, "tenant-a", id)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	recorded := 0
	for _, ch := range chunks {
		recorded += len(ch.Hashes)
		for _, e := range ch.Entries {
			if e.Seq > 0 {
				seen[e.Seq]++
			}
		}
	}
	for seq := uint64(1); seq <= 5; seq++ {
		if seen[seq] != 1 {
			t.Fatalf("input %d appears %d times in the log", seq, seen[seq])
		}
	}
	if recorded == 0 {
		t.Fatal("no state hashes recorded")
	}
	inst, hashes, err := Replay(ctx, testEng, builtin.Arena, spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	inst.Close(ctx)
	if len(hashes) != recorded {
		t.Fatalf("replay checked %d hashes, %d recorded", len(hashes), recorded)
	}
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
}

func TestWrongClusterToken(t *testing.T) {
	n, _ := startNode(t, "n-token")
	bad := clusterv1connect.NewNodeServiceClient(httptest.NewServer(n.Handler()).Client(), n.cfg.Addr, connect.WithInterceptors(bearer.Token("nope")))
	_, err := bad.GetGame(context.Background(), connect.NewRequest(&clusterv1.GetGameRequest{TenantId: "t", GameId: "g"}))
	wantCode(t, err, connect.CodeUnauthenticated)
}

// TestClaimRace: two nodes racing to claim one game — exactly one wins, every time.
func TestClaimRace(t *testing.T) {
	_, c1 := startNode(t, "n-race-1")
	_, c2 := startNode(t, "n-race-2")
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("race-%d-%d", i, time.Now().UnixNano())
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j, c := range []clusterv1connect.NodeServiceClient{c1, c2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = c.StartGame(context.Background(), connect.NewRequest(&clusterv1.StartGameRequest{
					TenantId: "tenant-race", GameId: id, BuildId: arenaID, Seed: 1, Config: []byte(`{}`)}))
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else if connect.CodeOf(err) != connect.CodeAlreadyExists {
				t.Fatalf("loser got %v, want AlreadyExists", err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d nodes won the claim", i, wins)
		}
		g, err := state.View().Game(context.Background(), "tenant-race", id)
		if err != nil || g.Owner == "" {
			t.Fatalf("owner after race: %+v %v", g, err)
		}
	}
}

// TestLostOwnershipStopsAppends: when the owner key changes under a node (another
// node took the game), the node's next append is refused by the fence and it
// stops the game instead of writing.
func TestLostOwnershipStopsAppends(t *testing.T) {
	_, c := startNode(t, "n-fence")
	ctx := context.Background()
	id := createGame(t, c, "tenant-f", 1)
	// Someone else takes the owner key (as a failover would after a lease lapse).
	if _, err := etcdCli.Delete(ctx, clusterstate.OwnerKey("tenant-f", id)); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdCli.Put(ctx, clusterstate.OwnerKey("tenant-f", id), "someone-else"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.GetGame(ctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: "tenant-f", GameId: id}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node kept the game after losing its owner key")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, before, _ := ReadLog(ctx, state, "tenant-f", id)
	time.Sleep(600 * time.Millisecond)
	_, after, _ := ReadLog(ctx, state, "tenant-f", id)
	if len(after) != len(before) {
		t.Fatalf("log grew from %d to %d chunks after the node stopped the game", len(before), len(after))
	}
}

// TestLeaseLossStopsGames: when the node's lease is gone (revoked here, as an
// expiry would), the node stops every game claimed under it and registers again
// under a new lease, ready for new games.
func TestLeaseLossStopsGames(t *testing.T) {
	n, c := startNode(t, "n-lease")
	ctx := context.Background()
	id := createGame(t, c, "tenant-l", 1)
	old := n.sess.Load()
	if _, err := etcdCli.Revoke(ctx, clientv3.LeaseID(old.Lease())); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.GetGame(ctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: "tenant-l", GameId: id}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node kept simulating after its lease was lost")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for n.sess.Load() == old || n.sess.Load().Fenced() {
		if time.Now().After(deadline) {
			t.Fatal("node did not register again under a new lease")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := state.View().Node(ctx, "n-lease"); err != nil {
		t.Fatalf("node record after re-registering: %v", err)
	}
	createGame(t, c, "tenant-l", 0)
}

func arenaWasm() []byte { return builtin.Arena }

func mustModule(t *testing.T) *engine.Module {
	t.Helper()
	m, err := testEng.Compile(context.Background(), builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
