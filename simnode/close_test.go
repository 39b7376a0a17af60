package simnode

import (
	"context"
	"testing"
	"time"
)

// A node that stops without a drain (Close: SIGTERM without --drain-on-term,
// the end of "ludus dev") gives its games up: another node resumes them from
// their logs at once, without waiting for the stopped node's lease to expire,
// and the games go on (not failed).
func TestCloseReleasesGames(t *testing.T) {
	a, ca := startNodeOn(t, "n-close-a", state, 30*time.Second) // a lease that would outlast the test
	b, _ := startNode(t, "n-close-b")
	ctx := context.Background()
	id := createGame(t, ca, "tenant-close", 2)
	for end := time.Now().Add(10 * time.Second); ; {
		g, err := state.View().Game(ctx, "tenant-close", id)
		if err == nil && g.Status.Tick > 35 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the game did not start ticking: %+v %v", g, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	closed := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; {
		g, err := state.View().Game(ctx, "tenant-close", id)
		if err != nil {
			t.Fatal(err)
		}
		if g.Status.Finished() {
			t.Fatalf("the stopping node ended the game: %+v", g.Status)
		}
		if _, ok := b.game("tenant-close", id); ok && g.Owner == "n-close-b" {
			t.Logf("resumed on the other node %v after Close", time.Since(closed).Round(time.Millisecond))
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no other node resumed the game within 10 s (owner %q)", g.Owner)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
