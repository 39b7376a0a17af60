package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Finding 3 of the chaos run: node-side refusals reached players as
// NotFound ("not running on node node-7") and transport errors with node
// addresses. What a player sees of a node's error is an Unavailable without
// internals when the game is moving, or the node's own actionable refusal.
func TestPlayerError(t *testing.T) {
	gap := connect.NewError(connect.CodeAborted, errors.New("input 5 was not applied: input 4 never arrived"))
	if d, err := connect.NewErrorDetail(&ludusv1.InputGap{MissingSeq: 4, RefusedSeq: 5}); err == nil {
		gap.AddDetail(d)
	} else {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		in   error
		code connect.Code
		want string
	}{
		{"moved", connect.NewError(connect.CodeNotFound, errors.New(`game "g1" is not running on node node-7`)), connect.CodeUnavailable, "retry"},
		{"transport", connect.NewError(connect.CodeUnavailable, errors.New(`Post "http://127.0.0.1:4411/ludus.cluster.v1.NodeService/SendInput": connection reset by peer`)), connect.CodeUnavailable, "retry"},
		{"canceled", connect.NewError(connect.CodeCanceled, context.Canceled), connect.CodeUnavailable, "retry"},
		{"deadline", connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded), connect.CodeUnavailable, "retry"},
		{"plain", errors.New("dial tcp 127.0.0.1:1: connection refused"), connect.CodeUnavailable, "retry"},
		{"not joined", connect.NewError(connect.CodeFailedPrecondition, errors.New("join the game before sending input")), connect.CodeFailedPrecondition, "join the game"},
		{"gap", gap, connect.CodeAborted, "input 4 never arrived"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := playerError("g1", c.in)
			if connect.CodeOf(got) != c.code || !strings.Contains(got.Error(), c.want) {
				t.Fatalf("playerError(%v) = %v; want %v containing %q", c.in, got, c.code, c.want)
			}
			for _, leak := range []string{"127.0.0.1", "http://", "node-7", "NodeService", "connection"} {
				if strings.Contains(got.Error(), leak) {
					t.Fatalf("playerError leaks %q: %v", leak, got)
				}
			}
		})
	}
	var ce *connect.Error
	if !errors.As(playerError("g1", gap), &ce) || len(ce.Details()) != 1 {
		t.Fatal("the InputGap detail did not reach the player")
	}
}
