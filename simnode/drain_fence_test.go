package simnode

import (
	"context"
	"testing"
	"time"

	"ludus.dev/ludus/clusterstate"
)

// TestDrainingNodeReleasesRatherThanResumes: a node fenced while it drains
// stops its games, and its drain, finding none left, reports the node
// drained; its sweep then found their claims naming it and resumed them
// (Reclaim), and the Close that followed the drain failed them ("node
// shutting down"): games lost to a drain. A draining node now releases such
// a claim, and another node takes the game over from its log.
func TestDrainingNodeReleasesRatherThanResumes(t *testing.T) {
	a, ca := startNode(t, "n-drainfence-a")
	startNode(t, "n-drainfence-b")
	const tenant = "tenant-drainfence"
	id := createGame(t, ca, tenant, 2)
	waitOwner(t, tenant, id, "n-drainfence-a")

	// The drain has begun (the flag alone: a handoff would move the game
	// before the fence), and the node loses its session.
	a.draining.Store(true)
	prev := a.sess.Load()
	prev.Fence("test: etcd went away during the drain")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, running := a.game(tenant, id); !running && a.sess.Load() != prev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the game kept running on a fenced session, or the node did not register again")
		}
	}
	a.sweep() // finds the claim naming it
	waitOwner(t, tenant, id, "n-drainfence-b")
	if _, running := a.game(tenant, id); running {
		t.Fatal("the draining node resumed the game")
	}
	// The drain is over: the node closes, and the game runs on.
	a.Close(context.Background())
	time.Sleep(200 * time.Millisecond)
	g, err := state.View().Game(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if g.Status.State != clusterstate.StateRunning || g.Owner != "n-drainfence-b" {
		t.Fatalf("after the drained node closed: %+v", g)
	}
}
