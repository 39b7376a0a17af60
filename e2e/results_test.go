package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// TestMatchResultReachesBackend: a match that ends on its own is reported by
// the sim node with its match-scoped credential and shows up, once, in the
// studio's match results with the human player's account.
func TestMatchResultReachesBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := protocols()[0]
	op := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	created, err := op.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: "results", Name: "Results Studio"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	admin := ludusv1connect.NewAdminServiceClient(p.client, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)), connect.WithSendMaxBytes(64<<20))
	if _, err := admin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "arena", Wasm: arenaWasm()})); err != nil {
		t.Fatal(err)
	}
	pl := login(t, p, "results")
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 7, Config: []byte(`{"score_limit":1}`)}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	s, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id}))
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	for s.Receive() {
		if st := s.Msg().GetStatus(); st != nil && st.State == "ended" {
			ended = true
			break
		}
	}
	s.Close()
	if !ended {
		t.Fatalf("the match never ended: %v", s.Err())
	}
	var last *connect.Response[ludusv1.ListMatchResultsResponse]
	for {
		res, err := admin.ListMatchResults(ctx, connect.NewRequest(&ludusv1.ListMatchResultsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		last = res
		n := 0
		for _, r := range res.Msg.Results {
			if r.MatchId != id {
				continue
			}
			n++
			if len(r.Players) != 1 || r.Players[0].AccountId != pl.account || r.Players[0].DurationMs <= 0 {
				t.Fatalf("result %+v does not carry the human player %s", r, pl.account)
			}
		}
		if n > 1 {
			t.Fatalf("match %s recorded %d times", id, n)
		}
		if n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the match result of %s never reached the backend; results: %v", id, last.Msg.Results)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The finished game's log leaves etcd for the backend's storage, and
	// `ludus ctl game replay` re-runs it from there.
	for {
		lg, err := admin.GetGameLog(ctx, connect.NewRequest(&ludusv1.GetGameLogRequest{GameId: id}))
		if err == nil && len(lg.Msg.Chunks) > 0 {
			if lg.Msg.State != "ended" || lg.Msg.FinalTick <= 0 {
				t.Fatalf("archived log: state %q tick %d", lg.Msg.State, lg.Msg.FinalTick)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the game log was never archived: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		resp, err := stack.Etcd.Raw().Get(ctx, "/ludus/logs/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, kv := range resp.Kvs {
			if strings.Contains(string(kv.Key), id) {
				left++
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d log chunks of the archived game are still in etcd", left)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if testing.Short() {
		return
	}
	// The key goes through the environment, not argv (where ps shows it).
	cmd := exec.CommandContext(ctx, ludusBinary(t), "ctl", "--url", stack.GatewayURL, "game", "replay", id)
	cmd.Env = append(os.Environ(), "LUDUS_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctl game replay: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "state hashes verified") || !strings.Contains(string(out), `"ended":true`) {
		t.Fatalf("ctl game replay printed:\n%s", out)
	}
	t.Logf("%s", out)
}
