package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// TestFindMatchPlaysTheMatch: four players searching for the demo tenant's
// arena mode (two teams of two, the rules `ludus dev` seeds) through the
// gateway are told the same game; it runs on a node of their region, each of
// them can join it, and the game lists them.
func TestFindMatchPlaysTheMatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := protocols()[0]
	type outcome struct {
		pl    *player
		found *ludusv1.MatchFound
		err   error
	}
	results := make(chan outcome, 4)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		pl := login(t, p, devstack.DemoTenant)
		mm := ludusv1connect.NewMatchmakingServiceClient(p.client, stack.GatewayURL,
			append(append([]connect.ClientOption{}, p.opts...), connect.WithInterceptors(withTicket(&pl.ticket)))...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := mm.FindMatch(ctx, connect.NewRequest(&ludusv1.FindMatchRequest{Mode: "arena", RttMs: map[string]int32{"local": 20}}))
			if err != nil {
				results <- outcome{pl: pl, err: err}
				return
			}
			defer s.Close()
			for s.Receive() {
				if f := s.Msg().GetFound(); f != nil {
					results <- outcome{pl: pl, found: f}
					return
				}
				if c := s.Msg().GetCancelled(); c != nil {
					t.Errorf("cancelled: %s", c.Reason)
				}
			}
			results <- outcome{pl: pl, err: s.Err()}
		}()
	}
	wg.Wait()
	close(results)
	game := ""
	var players []*player
	for r := range results {
		if r.err != nil || r.found == nil {
			t.Fatalf("a search ended without a match: %v", r.err)
		}
		if game == "" {
			game = r.found.GameId
		}
		if r.found.GameId != game || r.found.Region != "local" {
			t.Fatalf("found %+v; another player was told game %s", r.found, game)
		}
		players = append(players, r.pl)
	}
	// A player of the tenant who was not matched into it cannot take a seat,
	// though the game is listed and has free ones.
	outsider := login(t, p, devstack.DemoTenant)
	_, err := outsider.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: game}))
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "matched game") {
		t.Fatalf("an unmatched player joining the matched game: %v, want PermissionDenied", err)
	}
	for _, pl := range players {
		if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: game})); err != nil {
			t.Fatalf("joining the matched game: %v", err)
		}
	}
	list, err := players[0].games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range list.Msg.Games {
		if g.GameId == game {
			if g.Players != 4 {
				t.Fatalf("the matched game has %d players, want 4", g.Players)
			}
			return
		}
	}
	t.Fatalf("the matched game %s is not running", game)
}

// TestFindMatchRefusesNonsense: modes without rules and absurd round trips.
func TestFindMatchRefusesNonsense(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	mm := ludusv1connect.NewMatchmakingServiceClient(p.client, stack.GatewayURL,
		append(append([]connect.ClientOption{}, p.opts...), connect.WithInterceptors(withTicket(&pl.ticket)))...)
	for name, req := range map[string]*ludusv1.FindMatchRequest{
		"no rules":   {Mode: "nosuchmode", RttMs: map[string]int32{"local": 20}},
		"absurd rtt": {Mode: "arena", RttMs: map[string]int32{"local": -5}},
	} {
		s, err := mm.FindMatch(ctx, connect.NewRequest(req))
		if err == nil {
			for s.Receive() {
				t.Errorf("%s: got %v", name, s.Msg())
			}
			err = s.Err()
		}
		if code := connect.CodeOf(err); code != connect.CodeNotFound && code != connect.CodeInvalidArgument {
			t.Errorf("%s: err = %v, want NotFound or InvalidArgument", name, err)
		}
	}
	// What the protos declare is refused with the field named, for both
	// calls (the service validates; the gateway does not validate again).
	for name, req := range map[string]*ludusv1.FindMatchRequest{
		"negative rtt":  {Mode: "arena", RttMs: map[string]int32{"local": -5}},
		"no regions":    {Mode: "arena"},
		"bad mode":      {Mode: "arena mode", RttMs: map[string]int32{"local": 20}},
		"party of 1000": {Mode: "arena", PartyCode: "ABCDEF", PartySize: 1000, RttMs: map[string]int32{"local": 20}},
	} {
		s, err := mm.FindMatch(ctx, connect.NewRequest(req))
		if err == nil {
			for s.Receive() {
				t.Errorf("%s: got %v", name, s.Msg())
			}
			err = s.Err()
		}
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "validation error") {
			t.Errorf("%s: err = %v, want InvalidArgument with the field's validation error", name, err)
		}
	}
	_, err := mm.CreateParty(ctx, connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: "arena", Size: -1}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "size") {
		t.Errorf("CreateParty of size -1: err = %v, want InvalidArgument naming the size", err)
	}
}
