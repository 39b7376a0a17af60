package simnode

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFencedLeaseIsRevoked: a node whose session was fenced registers again
// under a new lease, and the etcd client goes on renewing the old one (so
// that the node can reclaim its games still claimed under it). It was
// renewed for as long as the node ran, one more lease per fence, and a game
// the node did not reclaim stayed claimed under it by a node that did not
// run it. The node now revokes it a while after registering again, and
// Close revokes one whose while has not passed.
func TestFencedLeaseIsRevoked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		close bool
	}{{"after the grace", 300 * time.Millisecond, false}, {"at close", time.Hour, true}} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(Config{ID: "n-fenced-lease-" + tc.name[:2], Addr: "http://127.0.0.1:1", Etcd: state, Engine: testEng, Modules: staticModules{},
				LeaseTTL: 5 * time.Second, ClusterToken: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			n.fencedLeaseGrace = tc.grace
			if err := n.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			closed := false
			t.Cleanup(func() {
				if !closed {
					n.Close(context.Background())
				}
			})
			old := n.sess.Load()
			old.Fence("a test fenced it")
			for deadline := time.Now().Add(10 * time.Second); n.sess.Load() == old; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the node did not register again")
				}
			}
			if tc.close {
				n.Close(context.Background())
				closed = true
			}
			ttl := func() int64 {
				resp, err := etcdCli.TimeToLive(context.Background(), clientv3.LeaseID(old.Lease()))
				if err != nil {
					t.Fatal(err)
				}
				return resp.TTL
			}
			// Well within the lease's 5 s TTL: one left to expire, or renewed,
			// would still be there.
			for deadline := time.Now().Add(2 * time.Second); ttl() != -1; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the fenced lease is still alive (TTL %d s) 2 s on", ttl())
				}
			}
		})
	}
}
