package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

// The directory cancels calls to a node as soon as the game's owner becomes
// another node (or none), and leaves calls to the new owner alone.
func TestDirectoryCancelsCallsToFormerOwner(t *testing.T) {
	w := &directory{calls: map[string]map[*ownerCall]struct{}{}}
	toOld, doneOld := w.track(context.Background(), "t", "g", "node-1")
	defer doneOld()
	toNew, doneNew := w.track(context.Background(), "t", "g", "node-2")
	defer doneNew()
	other, doneOther := w.track(context.Background(), "t", "h", "node-1")
	defer doneOther()
	w.cancelCalls("t/g", "node-2")
	select {
	case <-toOld.Done():
		if !errors.Is(context.Cause(toOld), errOwnerChanged) {
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
