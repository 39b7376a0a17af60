package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/client"
	"ludus.dev/ludus/ops/devstack"
)

// TestClientFindsMatch: four native Go clients search the demo tenant's arena
// mode (two teams of two, as `ludus dev` seeds it) with round trips they
// measured themselves; each is told the same game in region "local", two per
// team, and each joins it and receives frames. A second search by a player
// already searching, and a search of a mode without rules, are refused with
// their codes.
func TestClientFindsMatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if _, err := goClient(t, ctx, devstack.DemoTenant).FindMatch(ctx, client.FindMatchOptions{Mode: "nosuchmode"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a mode without rules: err %v, want NotFound", err)
	}

	type outcome struct {
		c       *client.Client
		found   client.Found
		updates []client.Update
		err     error
	}
	results := make(chan outcome, 4)
	for i := range 4 {
		c := goClient(t, ctx, devstack.DemoTenant)
		s, err := c.FindMatch(ctx, client.FindMatchOptions{Mode: "arena"}) // RTT measured by Ping
		if err != nil {
			t.Fatalf("player %d: %v", i, err)
		}
		if i == 0 {
			// Still queued alone: searching again is refused, and the first
			// search goes on.
			if _, err := c.FindMatch(ctx, client.FindMatchOptions{Mode: "arena", RTT: map[string]int32{"local": 5}}); connect.CodeOf(err) != connect.CodeAlreadyExists {
				t.Fatalf("a second search of the same player: err %v, want AlreadyExists", err)
			}
		}
		go func() {
			o := outcome{c: c}
			for u := range s.Updates() {
				o.updates = append(o.updates, u)
				if f, ok := u.(client.Found); ok {
					o.found = f
				}
			}
			if o.found.GameID == "" {
				o.err = fmt.Errorf("no match: updates %v, err %v", o.updates, s.Err())
			}
			results <- o
		}()
	}

	game := ""
	teams := map[int]int{}
	var players []*client.Client
	for range 4 {
		var o outcome
		select {
		case o = <-results:
		case <-ctx.Done():
			t.Fatalf("%d of 4 searches ended: %v", len(players), ctx.Err())
		}
		if o.err != nil {
			t.Fatal(o.err)
		}
		if _, ok := o.updates[0].(client.Searching); !ok {
			t.Fatalf("the first update is %v, want searching", o.updates[0])
		}
		if game == "" {
			game = o.found.GameID
		}
		if o.found.GameID != game || o.found.Region != "local" {
			t.Fatalf("found %v; another player was told game %s", o.found, game)
		}
		if len(o.found.Teammates) != 2 {
			t.Fatalf("found %v: teammates %v, want 2 players", o.found, o.found.Teammates)
		}
		teams[o.found.Team]++
		players = append(players, o.c)
	}
	if len(teams) != 2 || teams[0] != 2 || teams[1] != 2 {
		t.Fatalf("teams %v, want two of two", teams)
	}

	slots := map[int]bool{}
	var watchers []*watcher
	for _, c := range players {
		s, err := c.Play(ctx, game, client.Pixels)
		if err != nil {
			t.Fatalf("playing the matched game: %v", err)
		}
		defer s.Close()
		if s.Game().GameId != game || slots[s.Slot()] {
			t.Fatalf("joined game %s in slot %d; slots taken %v", s.Game().GameId, s.Slot(), slots)
		}
		slots[s.Slot()] = true
		watchers = append(watchers, watch(s, nil))
	}
	for i, w := range watchers {
		w.waitFor(t, fmt.Sprintf("player %d's frames", i), 30*time.Second, func() bool { return w.count >= 10 })
		if f := w.last(); f.Format != "indexed8" {
			t.Fatalf("player %d: a frame in %q", i, f.Format)
		}
	}
}
