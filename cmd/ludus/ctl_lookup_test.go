package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// fakeOperator answers the admin and fleet calls ctl's lookups make.
type fakeOperator struct {
	ludusv1connect.UnimplementedAdminServiceHandler
	ludusv1connect.UnimplementedFleetServiceHandler
	handedOffTenant string
	ended           *ludusv1.EndGameRequest
}

func (f *fakeOperator) EndGame(_ context.Context, req *connect.Request[ludusv1.EndGameRequest]) (*connect.Response[ludusv1.EndGameResponse], error) {
	if req.Msg.GameId == "gone" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New(`no game "gone" in tenant "t-0002"`))
	}
	f.ended = req.Msg
	return connect.NewResponse(&ludusv1.EndGameResponse{NodeId: "n1", Tick: 420}), nil
}

func (f *fakeOperator) ListTenants(context.Context, *connect.Request[ludusv1.ListTenantsRequest]) (*connect.Response[ludusv1.ListTenantsResponse], error) {
	return connect.NewResponse(&ludusv1.ListTenantsResponse{Tenants: []*ludusv1.Tenant{
		{Id: "t-0001", Slug: "demo", Name: "Demo"}, {Id: "t-0002", Slug: "snake", Name: "Snake"}}}), nil
}

func (f *fakeOperator) HandoffGame(_ context.Context, req *connect.Request[ludusv1.HandoffGameRequest]) (*connect.Response[ludusv1.HandoffGameResponse], error) {
	f.handedOffTenant = req.Msg.TenantId
	return connect.NewResponse(&ludusv1.HandoffGameResponse{FromNodeId: "n1", ToNodeId: "n2"}), nil
}

func (f *fakeOperator) ListArchivedGames(context.Context, *connect.Request[ludusv1.ListArchivedGamesRequest]) (*connect.Response[ludusv1.ListArchivedGamesResponse], error) {
	at := timestamppb.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	return connect.NewResponse(&ludusv1.ListArchivedGamesResponse{Games: []*ludusv1.ArchivedGame{
		{GameId: "g-won", State: "ended", FinalTick: 900, ArchivedAt: at},
		{GameId: "g-trap", State: "failed", Message: "module trapped at tick 41: unreachable", FinalTick: 41, ArchivedAt: at},
	}}), nil
}

func (f *fakeOperator) ListMatchResults(context.Context, *connect.Request[ludusv1.ListMatchResultsRequest]) (*connect.Response[ludusv1.ListMatchResultsResponse], error) {
	return connect.NewResponse(&ludusv1.ListMatchResultsResponse{Results: []*ludusv1.MatchResult{
		{MatchId: "g-won", Players: []*ludusv1.PlayerResult{{AccountId: "acc-ada", Score: 12}, {AccountId: "acc-bob", Score: 7}}}}}), nil
}

func operatorServer(t *testing.T) (*fakeOperator, string) {
	f := &fakeOperator{}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAdminServiceHandler(f))
	mux.Handle(ludusv1connect.NewFleetServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestCtlHandoffTakesATenantSlug(t *testing.T) {
	f, url := operatorServer(t)
	ctx := context.Background()
	for typed, want := range map[string]string{"snake": "t-0002", "t-0001": "t-0001"} {
		var out bytes.Buffer
		if err := runCtl(ctx, []string{"--url", url, "--key", "k", "game", "handoff", typed, "g1"}, &out); err != nil {
			t.Fatalf("handoff %s: %v", typed, err)
		}
		if f.handedOffTenant != want {
			t.Fatalf("handoff %s sent tenant %q, want %q", typed, f.handedOffTenant, want)
		}
	}
	var out bytes.Buffer
	err := runCtl(ctx, []string{"--url", url, "--key", "k", "game", "handoff", "nosuch", "g1"}, &out)
	if err == nil || !strings.Contains(err.Error(), `no tenant has the slug or id "nosuch"`) {
		t.Fatalf("unknown tenant: err = %v", err)
	}
}

func TestCtlGameEnd(t *testing.T) {
	f, url := operatorServer(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := runCtl(ctx, []string{"--url", url, "--key", "k", "game", "end", "snake", "g1", "cheating", "reported"}, &out); err != nil {
		t.Fatal(err)
	}
	if f.ended == nil || f.ended.TenantId != "t-0002" || f.ended.GameId != "g1" || f.ended.Reason != "cheating reported" {
		t.Fatalf("sent %+v", f.ended)
	}
	if !strings.Contains(out.String(), "game g1 ended on n1 at tick 420") {
		t.Fatalf("printed %q", out.String())
	}
	if err := runCtl(ctx, []string{"--url", url, "--key", "k", "game", "end", "snake", "gone"}, &out); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a game that does not exist: %v", err)
	}
}

func TestCtlGamesEndedShowsResults(t *testing.T) {
	_, url := operatorServer(t)
	var out bytes.Buffer
	if err := runCtl(context.Background(), []string{"--url", url, "--key", "k", "games", "--ended"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"g-won", "acc-ada 12, acc-bob 7", "g-trap", "failed", "module trapped at tick 41: unreachable"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}
