package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/games/builtin"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/localcluster"
	"ludus.dev/ludus/simnode/engine"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// ludusBinary builds the real binary once per test process.
func ludusBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process test: builds and runs the ludus binary")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ludus-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ludus")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/ludus").CombinedOutput()
		if err != nil {
			binErr = err
			t.Logf("%s", out)
		}
	})
	if binErr != nil {
		t.Fatalf("build ludus: %v", binErr)
	}
	return binPath
}

func startCluster(t *testing.T, nodes, etcdMembers int) *localcluster.Cluster {
	t.Helper()
	bin := ludusBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := localcluster.Config{Binary: bin, Dir: t.TempDir(), Nodes: nodes, EtcdMembers: etcdMembers,
		LeaseTTL: 2 * time.Second, Module: builtin.Arena, WazeroCache: sharedCache()}
	if os.Getenv("LUDUS_E2E_LOG") != "" {
		cfg.Logs = os.Stderr
	}
	c, err := localcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestKillNodeMultiProcess: real binaries — etcd, backend, gateway and three
// sim nodes; 30 games with bots and scripted players that record every
// acknowledged input; kill -9 one sim node. Every game continues on another
// node, every acknowledged input appears exactly once in the final log, and
// each game's recorded state hashes equal a full replay of its log.
func TestKillNodeMultiProcess(t *testing.T) {
	c := startCluster(t, 3, 1)
	eng, err := engine.New(context.Background(), engine.Config{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Streams in snapshot mode (the default a browser picks for the arena): a
	// snapshot stream re-attaches across the failover like a pixel stream.
	res, err := localcluster.RunFailoverWith(ctx, c, eng, builtin.Arena, localcluster.FailoverOptions{
		Games: failoverGames(), Warmup: 3 * time.Second, Delivery: ludusv1.Delivery_DELIVERY_SNAPSHOTS})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.GamesLost != 0 || res.AckedInputsLost != 0 || res.InputsDoubled != 0 || res.ReplayMismatch != 0 || res.OkInputsNotInLog != 0 {
		t.Fatalf("failover lost something: %+v", res)
	}
	if res.VictimGames == 0 || res.AckedInputs == 0 || res.HashesChecked == 0 {
		t.Fatalf("the test exercised nothing: %+v", res)
	}
}

// TestStoppedOwnerFencesItself: SIGSTOP an owner past its lease TTL, then
// SIGCONT: it appends nothing more and stops its games, which other nodes run.
func TestStoppedOwnerFencesItself(t *testing.T) {
	c := startCluster(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	auth := ludusv1connect.NewAuthServiceClient(http.DefaultClient, c.GatewayURL)
	l, err := auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: "sigstop-device-0001"}))
	if err != nil {
		t.Fatal(err)
	}
	ticket := l.Msg.Ticket
	games := ludusv1connect.NewGameServiceClient(http.DefaultClient, c.GatewayURL, connect.WithInterceptors(withTicket(&ticket)))
	byNode := map[string][]string{}
	for i := 0; i < 4; i++ {
		g, err := games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2}))
		if err != nil {
			t.Fatal(err)
		}
		byNode[g.Msg.Game.NodeId] = append(byNode[g.Msg.Game.NodeId], g.Msg.Game.GameId)
	}
	victim, other := "node-1", "node-2"
	if len(byNode[victim]) == 0 {
		victim, other = other, victim
	}
	// A player of one of the victim's games streams frames and keeps sending
	// inputs: when the owner freezes, an input in flight to it must be
	// abandoned as soon as its claim expires and re-sent to the new owner, so
	// inputs come back with the frames (not after a call timeout).
	played := byNode[victim][0]
	if _, err := games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: played})); err != nil {
		t.Fatal(err)
	}
	frames, err := games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: played}))
	if err != nil {
		t.Fatal(err)
	}
	defer frames.Close()
	for got := 0; got < 3; {
		if !frames.Receive() {
			t.Fatalf("frames before the freeze: %v", frames.Err())
		}
		if frames.Msg().GetFrame() != nil {
			got++
		}
	}
	if _, err := games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: played, Seq: 1, Payload: []byte{1}})); err != nil {
		t.Fatal(err)
	}
	p := c.Proc(victim)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	framesBack := make(chan time.Duration, 1)
	go func() {
		var last int64
		for frames.Receive() {
			if f := frames.Msg().GetFrame(); f != nil {
				if last == 0 {
					last = f.Tick
				} else if time.Since(stopped) > time.Second {
					framesBack <- time.Since(stopped)
					return
				}
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // the frozen node is the owner the gateway sees
	// As docs/API.md tells clients: Unavailable means retry the same seq.
	var inputErr error
	for {
		_, inputErr = games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: played, Seq: 2, Payload: []byte{2}}))
		if connect.CodeOf(inputErr) != connect.CodeUnavailable || time.Since(stopped) > 20*time.Second {
			break
		}
	}
	inputBack := time.Since(stopped)
	if inputErr != nil {
		t.Fatalf("an input sent to a frozen owner was not re-sent to the new owner: %v (after %v)", inputErr, inputBack)
	}
	select {
	case fb := <-framesBack:
		t.Logf("after SIGSTOP: input acknowledged in %v, frames back in %v", inputBack.Round(time.Millisecond), fb.Round(time.Millisecond))
		if inputBack > fb+1500*time.Millisecond {
			t.Fatalf("inputs recovered %v after the freeze, frames %v: inputs lag the frames", inputBack, fb)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("frames did not come back after the freeze")
	}
	// Past the TTL the other node takes the games over.
	for _, id := range byNode[victim] {
		waitOwnerIs(t, ctx, games, id, other)
	}
	logs := map[string]int{}
	for _, id := range byNode[victim] {
		resp, err := c.Etcd.Raw().Get(ctx, "/ludus/logs/"+c.TenantID+"/"+id+"/", clientv3WithPrefix()...)
		if err != nil {
			t.Fatal(err)
		}
		logs[id] = len(resp.Kvs)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The woken node must stop its games rather than write to their logs.
	victimCred, err := clustercred.GatewayToNode(c.ClusterToken, victim)
	if err != nil {
		t.Fatal(err)
	}
	node := clusterv1connect.NewNodeServiceClient(http.DefaultClient, c.NodeAddrs[victim], connect.WithInterceptors(withTicket(&victimCred)))
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range byNode[victim] {
		for {
			_, err := node.GetGame(ctx, connect.NewRequest(&clusterv1.GetGameRequest{TenantId: c.TenantID, GameId: id}))
			if connect.CodeOf(err) == connect.CodeNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("woken node still runs game %s: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every chunk in the logs is the new owner's: replaying them works and the
	// old owner wrote nothing after waking (it would have overwritten or gapped).
	eng, err := engine.New(ctx, engine.Config{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	for _, id := range byNode[victim] {
		if err := replayOK(ctx, c, eng, id); err != nil {
			t.Fatalf("game %s: %v", id, err)
		}
		waitOwnerIs(t, ctx, games, id, other)
	}
	t.Logf("logs at SIGCONT: %v", logs)
}
