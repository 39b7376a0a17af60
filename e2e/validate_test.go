package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/ops/devstack"
)

// TestRulesDeclaredInProtos: requests breaking the buf.validate rules of
// game.proto are refused with InvalidArgument naming the field, on unary and
// streaming calls alike, before they reach a sim node.
func TestRulesDeclaredInProtos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pl := login(t, protocols()[0], devstack.DemoTenant)
	check := func(what string, err error, field string) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: got %v, want InvalidArgument naming %s", what, err, field)
		}
	}
	_, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: "../../etc/passwd"}))
	check("path in game_id", err, "game_id")
	_, err = pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: strings.Repeat("a", 65)}))
	check("65-character game_id", err, "game_id")
	_, err = pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: -1}))
	check("negative bots", err, "bots")
	_, err = pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{}))
	check("no module", err, "module_name")
	s, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: "bad id!"}))
	if err == nil {
		for s.Receive() {
			t.Fatal("a stream with an invalid game id delivered a message")
		}
		err = s.Err()
	}
	check("stream with a bad game_id", err, "game_id")
}
