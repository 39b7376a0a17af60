package clusterstate

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ludus.dev/ludus/ops/etcdserver"
)

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
	// An etcd of its own: the directory sees every key of it.
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := es.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close(); es.Close() })
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
	put(NodeKey("n1"), NodeInfo{ID: "n1", Addr: "http://n1", Capacity: 8})
	put(OwnerKey("t", "g1"), OwnerValue("n1", "c1"))
	reads := prometheus.NewCounter(prometheus.CounterOpts{Name: "reads"})
	d := NewDirectory(New(cli), reads)
	eventually(t, "the initial load", func() bool { _, ok := d.Owner("t", "g1"); return ok })
	if n, _ := d.Owner("t", "g1"); n.Addr != "http://n1" {
		t.Fatalf("owner of g1: %+v", n)
	}
	if _, ok := d.Owner("other-tenant", "g1"); ok {
		t.Fatal("a game was found under another tenant")
	}
	if rev, ok := d.Revision(); !ok || rev == 0 {
		t.Fatalf("revision %d, current %v", rev, ok)
	}
	loads := testutil.ToFloat64(reads)

	// A second node joins and the game moves to it.
	changed := d.Changed()
	put(NodeKey("n2"), NodeInfo{ID: "n2", Addr: "http://n2", Capacity: 8})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("a new node did not wake waiters")
	}
	call, done := d.Track(ctx, "t", "g1", "n1")
	defer done()
	put(OwnerKey("t", "g1"), OwnerValue("n2", "c2"))
	eventually(t, "the move", func() bool { n, _ := d.Owner("t", "g1"); return n.ID == "n2" })
	select {
	case <-call.Done():
		if !errors.Is(context.Cause(call), ErrOwnerChanged) {
			t.Fatalf("call cancelled with %v", context.Cause(call))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call to the former owner was not abandoned")
	}
	// The game ends: its owner key goes.
	if _, err := cli.Delete(ctx, OwnerKey("t", "g1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the end", func() bool { _, ok := d.Owner("t", "g1"); return !ok })
	if nodes, ok := d.Nodes(); !ok || len(nodes) != 2 {
		t.Fatalf("nodes %v %v", nodes, ok)
	}
	if got := testutil.ToFloat64(reads); got != loads {
		t.Fatalf("following changes read etcd %v times", got-loads)
	}
	// A node whose lease is gone leaves the directory.
	if _, err := cli.Delete(ctx, NodeKey("n1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node to leave", func() bool { _, ok := d.Node("n1"); return !ok })
}

// The directory cancels calls to a node as soon as the game's owner becomes
// another node (or none), and leaves calls to the new owner alone.
func TestDirectoryCancelsCallsToFormerOwner(t *testing.T) {
	w := &Directory{calls: map[string]map[*ownerCall]struct{}{}}
	toOld, doneOld := w.Track(context.Background(), "t", "g", "node-1")
	defer doneOld()
	toNew, doneNew := w.Track(context.Background(), "t", "g", "node-2")
	defer doneNew()
	other, doneOther := w.Track(context.Background(), "t", "h", "node-1")
	defer doneOther()
	w.cancelCalls("t/g", "node-2")
	select {
	case <-toOld.Done():
		if !errors.Is(context.Cause(toOld), ErrOwnerChanged) {
			t.Fatalf("cause %v", context.Cause(toOld))
		}
	case <-time.After(time.Second):
		t.Fatal("a call to the former owner was not cancelled")
	}
	if toNew.Err() != nil || other.Err() != nil {
		t.Fatal("calls to the new owner, or of another game, were cancelled")
	}
	w.cancelCalls("t/g", "") // the owner key was deleted: no owner at all
	if toNew.Err() == nil {
		t.Fatal("a call to a node whose claim vanished was not cancelled")
	}
	doneOld()
	doneNew()
	doneOther()
	if len(w.calls) != 0 {
		t.Fatalf("finished calls are still tracked: %v", w.calls)
	}
}
