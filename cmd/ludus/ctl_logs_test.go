package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/clusterstate"
	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode/engine"
)

// debugFakes serve what `ludus ctl game logs|handoff|replay` call.
type debugFakes struct {
	ludusv1connect.UnimplementedAdminServiceHandler
	ludusv1connect.UnimplementedFleetServiceHandler
	ludusv1connect.UnimplementedGameLogServiceHandler
	builds map[string][]byte
}

func (f *debugFakes) ListTenants(context.Context, *connect.Request[ludusv1.ListTenantsRequest]) (*connect.Response[ludusv1.ListTenantsResponse], error) {
	return connect.NewResponse(&ludusv1.ListTenantsResponse{Tenants: []*ludusv1.Tenant{{Id: "t1", Slug: "acme"}}}), nil
}

func (f *debugFakes) HandoffGame(context.Context, *connect.Request[ludusv1.HandoffGameRequest]) (*connect.Response[ludusv1.HandoffGameResponse], error) {
	return nil, connect.NewError(connect.CodeAborted, errors.New("game g1 moved to node b at tick 40, then failed: match failed: node b could not resume it: desync in game g1"))
}

func (f *debugFakes) GameLogs(_ context.Context, req *connect.Request[ludusv1.GameLogsRequest], st *connect.ServerStream[ludusv1.GameLogsResponse]) error {
	if req.Msg.GameId != "g1" {
		return connect.NewError(connect.CodeNotFound, errors.New("no game"))
	}
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err := st.Send(&ludusv1.GameLogsResponse{NodeId: "a", Skipped: 3, Lines: []*ludusv1.GuestLogLine{
		{Seq: 4, Tick: 41, Time: at, Text: "hello"}, {Seq: 5, Tick: 42, Time: at, Stderr: true, Text: "oops"}}}); err != nil {
		return err
	}
	if !req.Msg.Follow {
		return nil
	}
	return st.Send(&ludusv1.GameLogsResponse{NodeId: "a", Dropped: 3, State: "failed", Message: "match failed: module trapped at tick 42"})
}

func (f *debugFakes) GetBuild(_ context.Context, req *connect.Request[ludusv1.GetBuildRequest]) (*connect.Response[ludusv1.GetBuildResponse], error) {
	b, ok := f.builds[req.Msg.BuildId]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such build"))
	}
	return connect.NewResponse(&ludusv1.GetBuildResponse{Wasm: b}), nil
}

func (f *debugFakes) GetGameLog(_ context.Context, req *connect.Request[ludusv1.GetGameLogRequest]) (*connect.Response[ludusv1.GetGameLogResponse], error) {
	spec, _ := json.Marshal(clusterstate.GameSpec{TenantID: "t1", GameID: req.Msg.GameId, BuildID: engine.BuildID(builtin.Pong), Seed: 1})
	if req.Msg.GameId == "unknown-build" {
		spec, _ = json.Marshal(clusterstate.GameSpec{TenantID: "t1", GameID: "x", BuildID: strings.Repeat("ab", 32), Seed: 1})
	}
	return connect.NewResponse(&ludusv1.GetGameLogResponse{SpecJson: spec, State: "ended"}), nil
}

func startDebugFakes(t *testing.T) string {
	f := &debugFakes{builds: map[string][]byte{engine.BuildID(builtin.Pong): builtin.Pong}}
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewAdminServiceHandler(f))
	mux.Handle(ludusv1connect.NewFleetServiceHandler(f))
	mux.Handle(ludusv1connect.NewGameLogServiceHandler(f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Setenv("LUDUS_KEY", "lds_test")
	t.Setenv("LUDUS_KEY_FILE", "")
	return srv.URL
}

// TestCtlHandoffFailureExitsNonZero: a handoff whose new owner could not
// resume the game is an error (ludus exits 1 with it), not "moved".
func TestCtlHandoffFailureExitsNonZero(t *testing.T) {
	url := startDebugFakes(t)
	var out bytes.Buffer
	err := runCtl(context.Background(), []string{"--url", url, "game", "handoff", "acme", "g1", "b"}, &out)
	if err == nil || !strings.Contains(err.Error(), "desync in game g1") || strings.Contains(out.String(), "moved") {
		t.Fatalf("err %v, output %q", err, out.String())
	}
}

func TestCtlGameLogs(t *testing.T) {
	url := startDebugFakes(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := runCtl(ctx, []string{"--url", url, "game", "logs", "g1", "-f"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "-- 3 lines dropped (the log keeps the newest lines) --\n" +
		"03:04:05.000 tick 41 out: hello\n" +
		"03:04:05.000 tick 42 err: oops\n" +
		"-- 3 lines were dropped in all --\n" +
		"-- game failed: match failed: module trapped at tick 42 --\n"
	got := strings.ReplaceAll(out.String(), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Local().Format("15:04:05.000"), "03:04:05.000")
	if got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	for _, args := range [][]string{{"game", "logs", "nope"}, {"game", "logs", "g1", "--bogus"}, {"game", "logs", "a", "b"}} {
		if err := runCtl(ctx, append([]string{"--url", url}, args...), &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestCtlReplayFetchesBuild: without --wasm, replay downloads the build the
// game ran from the backend.
func TestCtlReplayFetchesBuild(t *testing.T) {
	url := startDebugFakes(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := runCtl(ctx, []string{"--url", url, "game", "replay", "g1"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "replay: 0 ticks") {
		t.Fatalf("output %q", out.String())
	}
	err := runCtl(ctx, []string{"--url", url, "game", "replay", "unknown-build"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--wasm FILE") || connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown build: %v", err)
	}
}
