package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"ludus.dev/ludus/ops/etcdserver"
	"ludus.dev/ludus/ops/fleet"
)

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

// The directory follows node and owner keys through one load and a watch:
// lookups need no etcd read, changes wake waiters and cancel calls to a
// former owner, and it reloads after the watch is lost.
func TestDirectoryFollowsEtcd(t *testing.T) {
	cli := testEtcd(t)
	ctx := context.Background()
	put := func(k string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if s, ok := v.(string); ok {
			b = []byte(s)
		}
		if _, err := cli.Put(ctx, k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	put(fleet.NodeKey("n1"), fleet.NodeInfo{ID: "n1", Addr: "http://n1", Capacity: 8})
	put(fleet.OwnerKey("t", "g1"), fleet.OwnerValue("n1", "c1"))
	reads := prometheus.NewCounter(prometheus.CounterOpts{Name: "reads"})
	d := newDirectory(cli, reads)
	eventually(t, "the initial load", func() bool { _, ok := d.owner("t", "g1"); return ok })
	if n, _ := d.owner("t", "g1"); n.Addr != "http://n1" {
		t.Fatalf("owner of g1: %+v", n)
	}
	if _, ok := d.owner("other-tenant", "g1"); ok {
		t.Fatal("a game was found under another tenant")
	}
	loads := testutil.ToFloat64(reads)

	// A second node joins and the game moves to it.
	changed := d.changed()
	put(fleet.NodeKey("n2"), fleet.NodeInfo{ID: "n2", Addr: "http://n2", Capacity: 8})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("a new node did not wake waiters")
	}
	call, done := d.track(ctx, "t", "g1", "n1")
	defer done()
	put(fleet.OwnerKey("t", "g1"), fleet.OwnerValue("n2", "c2"))
	eventually(t, "the move", func() bool { n, _ := d.owner("t", "g1"); return n.ID == "n2" })
	select {
	case <-call.Done():
		if !errors.Is(context.Cause(call), errOwnerChanged) {
			t.Fatalf("call cancelled with %v", context.Cause(call))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call to the former owner was not abandoned")
	}
	// The game ends: its owner key goes.
	if _, err := cli.Delete(ctx, fleet.OwnerKey("t", "g1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the end", func() bool { _, ok := d.owner("t", "g1"); return !ok })
	if nodes, ok := d.nodeList(); !ok || len(nodes) != 2 {
		t.Fatalf("nodes %v %v", nodes, ok)
	}
	if got := testutil.ToFloat64(reads); got != loads {
		t.Fatalf("following changes read etcd %v times", got-loads)
	}
	// A node whose lease is gone leaves the directory.
	if _, err := cli.Delete(ctx, fleet.NodeKey("n1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node to leave", func() bool { _, ok := d.nodeRecord("n1"); return !ok })
}
