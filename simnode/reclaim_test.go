package simnode

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/clusterstate"
)

// Finding 4 of the chaos run: after an etcd outage a node resumed games under
// the claims of its pre-outage lease, which etcd had kept alive across its
// restart but which nobody renewed any more; when that lease expired the games
// moved a second time and players saw a second rollback. A node that finds
// its own claim on an older lease re-claims it under its current lease before
// resuming.
func TestResumeReclaimsAnOldLeasesClaim(t *testing.T) {
	n, c := startNode(t, "n-reclaim")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := createGame(t, c, "tenant-reclaim", 2)
	key := clusterstate.OwnerKey("tenant-reclaim", id)
	resp, err := etcdCli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner key: %v", err)
	}
	claim := string(resp.Kvs[0].Value)

	// The claim now hangs on a lease of the "previous session", kept alive by
	// the test the way a restarted etcd keeps it alive for one more TTL.
	old, err := etcdCli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdCli.Put(ctx, key, claim, clientv3.WithLease(old.ID)); err != nil {
		t.Fatal(err)
	}
	// The node loses its session (as when etcd went away) and registers again.
	prev := n.sess.Load()
	prev.Fence("test: etcd went away")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, running := n.game("tenant-reclaim", id); !running && n.sess.Load() != prev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the game kept running on a fenced session, or the node did not register again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The sweep finds the claim naming this node and resumes the game.
	n.sweep()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, running := n.game("tenant-reclaim", id); running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the game was not resumed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err = etcdCli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("owner key after resuming: %v", err)
	}
	if got := resp.Kvs[0].Lease; got != n.sess.Load().Lease() || n.reclaims.Load() < 1 {
		t.Fatalf("resumed under lease %x (reclaims %d); want the current lease %x", got, n.reclaims.Load(), n.sess.Load().Lease())
	}
	resumedClaim := string(resp.Kvs[0].Value)

	// The old lease expires: the game must not move again.
	if _, err := etcdCli.Revoke(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	resp, err = etcdCli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != resumedClaim {
		t.Fatalf("the game's claim changed after the old lease expired: %v", resp.Kvs)
	}
	g, running := n.game("tenant-reclaim", id)
	if !running || g.fencedByWriter.Load() {
		t.Fatal("the resumed game stopped when the old lease expired")
	}
}
