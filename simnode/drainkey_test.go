package simnode

import (
	"context"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// TestDrainRequestIsClearedOnceDrained: a node drained through etcd removes
// its drain request, so a node restarted under the same id does not drain
// again at once.
func TestDrainRequestIsClearedOnceDrained(t *testing.T) {
	n, _ := startNode(t, "n-drain-key")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := state.RequestDrain(ctx, n.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Drained():
	case <-ctx.Done():
		t.Fatal("the node did not drain")
	}
	resp, err := state.Raw().Get(ctx, clusterstate.DrainKey(n.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("the drain request %s is still there after the node drained", clusterstate.DrainKey(n.ID()))
	}
}
