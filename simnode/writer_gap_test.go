package simnode

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"connectrpc.com/connect"
	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
)

// TestWriterNeverCommitsPastAFailedChunk guards the log writer's ordering
// after a failure: once one chunk of a game failed for good (here an error
// other than ErrClaimLost, injected on that chunk's key until the writer
// gives up; in life a leaderless etcd, "too many requests"), no later chunk
// of the game may commit. The writer used to commit them, leaving a gap in
// the log: the game's inputs were acknowledged but could never be replayed,
// and every resume failed ("the log has a gap"). Now the game is released
// with its log ending before the failed chunk and resumes from there.
func TestWriterNeverCommitsPastAFailedChunk(t *testing.T) {
	const tenant, id = "tenant-gap", "gap-game"
	target := clusterstate.LogKey(tenant, id, 4)
	var failing atomic.Bool
	failing.Store(true)
	ic := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.TxnRequest); ok && failing.Load() {
			for _, op := range r.Success {
				if p := op.GetRequestPut(); p != nil && string(p.Key) == target {
					return status.Error(codes.Unknown, "injected: raft proposal dropped")
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	faulty, err := clientv3.New(clientv3.Config{Endpoints: etcdCli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(ic)}})
	if err != nil {
		t.Fatal(err)
	}
	defer faulty.Close()
	n, c := startNodeOn(t, "n-gap", clusterstate.New(faulty), 3*time.Second)
	ctx := context.Background()
	if _, err := c.StartGame(ctx, connect.NewRequest(&clusterv1.StartGameRequest{
		TenantId: tenant, GameId: id, BuildId: arenaID, Seed: 99, Config: []byte(`{"bots":1}`)})); err != nil {
		t.Fatal(err)
	}
	g, ok := n.game(tenant, id)
	if !ok {
		t.Fatal("game not running")
	}

	// seqs lists the log's chunk numbers and fails the test on a gap.
	seqs := func() []uint64 {
		t.Helper()
		resp, err := etcdCli.Get(ctx, clusterstate.LogPrefix(tenant, id), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []uint64
		for i, kv := range resp.Kvs {
			s, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), clusterstate.LogPrefix(tenant, id)), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if s != uint64(i+1) {
				t.Fatalf("the log has a gap: chunk %d follows chunk %d", s, i)
			}
			out = append(out, s)
		}
		return out
	}

	// Wait for the writer to give up on chunk 4, then let etcd take it again
	// (whoever resumes the game writes its next chunk under that number).
	deadline := time.Now().Add(15 * time.Second)
	for !g.fencedByWriter.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the writer never gave up on chunk 4")
		}
		seqs()
		time.Sleep(10 * time.Millisecond)
	}
	// The chunks queued behind chunk 4 reach etcd within a round or two.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		seqs()
	}
	failing.Store(false)

	// The game is released and resumed from its durable log (chunks 1-3):
	// it keeps running and its log grows past chunk 4 without a gap.
	for {
		s := seqs()
		l, err := state.ReadLog(ctx, tenant, id)
		if err == nil && l.Status.State != "" && l.Status.State != clusterstate.StateRunning {
			t.Fatalf("game ended as %q: %s", l.Status.State, l.Status.Message)
		}
		if len(s) >= 8 {
			if _, ok := n.game(tenant, id); ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the game did not resume: log chunks %v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
