// Package e2e runs whole-system tests: every role of Ludus in one process
// (ops/devstack: embedded etcd, SQLite backend, two sim nodes, gateway with the
// web UI) on loopback, driven by real clients over Connect, gRPC and gRPC-Web, by
// the real binary and by headless Chromium.
package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/ops/devstack"
)

var stack *devstack.Stack

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ludus-e2e")
	if err != nil {
		panic(err)
	}
	_ = os.Symlink(sharedCache(), dir+"/wazero-cache")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	level := slog.LevelWarn
	if os.Getenv("LUDUS_E2E_LOG") != "" {
		level = slog.LevelInfo
	}
	stack, err = devstack.Start(ctx, devstack.Config{
		HTTPAddr: "127.0.0.1:0", DataDir: dir, Nodes: 3, NoFsync: true, LeaseTTL: 5 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start dev stack:", err)
		os.Exit(1)
	}
	code := m.Run()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	stack.Close(sctx)
	scancel()
	os.RemoveAll(dir)
	os.Exit(code)
}

// protocol is one way a client can talk to the gateway.
type protocol struct {
	name   string
	client *http.Client
	opts   []connect.ClientOption
}

// h2cClient speaks HTTP/2 without TLS, as native gRPC clients do.
func h2cClient() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

func protocols() []protocol {
	return []protocol{
		{name: "connect", client: http.DefaultClient},
		{name: "grpc", client: h2cClient(), opts: []connect.ClientOption{connect.WithGRPC()}},
		{name: "grpcweb", client: http.DefaultClient, opts: []connect.ClientOption{connect.WithGRPCWeb()}},
	}
}

// player is a signed-in client of the gateway.
type player struct {
	ticket  string
	account string
	games   ludusv1connect.GameServiceClient
}

// play creates a game as req says, joins it and reads frames frames of its
// stream, which stays open for the test (closed when it ends).
func (pl *player) play(t *testing.T, ctx context.Context, req *ludusv1.CreateGameRequest, frames int) (*ludusv1.GameInfo, *connect.ServerStreamForClient[ludusv1.StreamFramesResponse]) {
	t.Helper()
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: g.Msg.Game.GameId})); err != nil {
		t.Fatal(err)
	}
	stream, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: g.Msg.Game.GameId}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	for n := 0; n < frames; {
		if !stream.Receive() {
			t.Fatalf("the stream of game %s ended after %d frames: %v", g.Msg.Game.GameId, n, stream.Err())
		}
		if stream.Msg().GetFrame() != nil {
			n++
		}
	}
	return g.Msg.Game, stream
}

func withTicket(ticket *string) connect.Interceptor {
	return ticketInterceptor{ticket}
}

type ticketInterceptor struct{ ticket *string }

func (t ticketInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+*t.ticket)
		return next(ctx, req)
	}
}

func (t ticketInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+*t.ticket)
		return conn
	}
}

func (t ticketInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func login(t *testing.T, p protocol, tenant string) *player {
	t.Helper()
	auth := ludusv1connect.NewAuthServiceClient(p.client, stack.GatewayURL, p.opts...)
	device := make([]byte, 16)
	_, _ = rand.Read(device)
	resp, err := auth.GuestLogin(context.Background(), connect.NewRequest(&ludusv1.GuestLoginRequest{
		Tenant: tenant, DeviceId: fmt.Sprintf("dev-%x", device), DisplayName: "tester"}))
	if err != nil {
		t.Fatalf("guest login over %s: %v", p.name, err)
	}
	pl := &player{ticket: resp.Msg.Ticket, account: resp.Msg.AccountId}
	pl.games = ludusv1connect.NewGameServiceClient(p.client, stack.GatewayURL,
		append(append([]connect.ClientOption{}, p.opts...), connect.WithInterceptors(withTicket(&pl.ticket)))...)
	return pl
}

// viewDiff counts the pixels that differ between two views of the same size.
func viewDiff(a, b []byte) int {
	n := 0
	for i := range a {
		if i < len(b) && a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestPlayOverEveryProtocol: a Go client logs in as guest, creates a game,
// receives at least 100 frames, sends inputs and sees the frames change because
// of them — over Connect, gRPC and gRPC-Web.
func TestPlayOverEveryProtocol(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pl := login(t, p, devstack.DemoTenant)
			// No bots: alone in the arena, the view only changes when we move.
			created, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 0}))
			if err != nil {
				t.Fatal(err)
			}
			id := created.Msg.Game.GameId
			joined, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
			if err != nil {
				t.Fatal(err)
			}
			if joined.Msg.Slot != 0 {
				t.Fatalf("joined slot %d, want 0", joined.Msg.Slot)
			}
			stream, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()

			var frames [][]byte
			var ticks []int64
			var status *ludusv1.Status
			next := func() {
				for stream.Receive() {
					if st := stream.Msg().GetStatus(); st != nil {
						status = st
						continue
					}
					f := stream.Msg().GetFrame()
					frames = append(frames, f.View)
					ticks = append(ticks, f.Tick)
					return
				}
				t.Fatalf("stream ended after %d frames: %v", len(frames), stream.Err())
			}
			for len(frames) < 60 {
				next()
			}
			if status == nil || status.NodeId == "" || status.ViewFormat != "indexed8" || status.TickRate != 35 {
				t.Fatalf("missing or incomplete status message: %+v", status)
			}
			idle := viewDiff(frames[len(frames)-2], frames[len(frames)-1])

			// Turn left: the input is acknowledged once durable, with the tick it
			// was applied at; frames after that tick must show a turned view.
			ack, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1 << 2}}))
			if err != nil {
				t.Fatal(err)
			}
			if ack.Msg.AckedSeq != 1 {
				t.Fatalf("acked seq %d, want 1", ack.Msg.AckedSeq)
			}
			before := frames[len(frames)-1]
			for ticks[len(ticks)-1] < ack.Msg.Tick+10 {
				next()
			}
			turned := viewDiff(before, frames[len(frames)-1])
			if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 2, Payload: []byte{0}})); err != nil {
				t.Fatal(err)
			}
			for len(frames) < 100 {
				next()
			}
			pixels := len(before) - 776
			t.Logf("%s: %d frames; idle frames differ in %d pixels, turning changed %d of %d", p.name, len(frames), idle, turned, pixels)
			if turned < pixels/10 {
				t.Fatalf("turning changed only %d of %d pixels", turned, pixels)
			}
			if idle*4 > turned {
				t.Fatalf("the view changes about as much idle (%d) as when turning (%d): input has no visible effect", idle, turned)
			}
		})
	}
}

// TestSecondPlayerAndSpectator: a second account joins the same game on its own
// slot, and a spectator stream shows the game too.
func TestSecondPlayerAndSpectator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := protocols()[0]
	a, b := login(t, p, devstack.DemoTenant), login(t, p, devstack.DemoTenant)
	created, err := a.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 2}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.Game.GameId
	ja, err := a.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if ja.Msg.Slot == jb.Msg.Slot {
		t.Fatalf("both players got slot %d", ja.Msg.Slot)
	}
	list, err := b.games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range list.Msg.Games {
		if g.GameId == id {
			found = true
			// A spectator's page picks its delivery from the listing.
			if g.SnapshotFormat == "" || g.InputKind != "state" {
				t.Fatalf("ListGames shows game %s without its snapshot format or input kind: %+v", id, g)
			}
		}
	}
	if !found {
		t.Fatalf("ListGames does not show game %s", id)
	}
	spec, err := b.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id}))
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	got := 0
	for got < 5 && spec.Receive() {
		if spec.Msg().GetFrame() != nil {
			got++
		}
	}
	if got < 5 {
		t.Fatalf("spectator got %d frames: %v", got, spec.Err())
	}
	// A spectator cannot send input without joining.
	c := login(t, p, devstack.DemoTenant)
	_, err = c.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}}))
	wantCode(t, err, connect.CodeFailedPrecondition)
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
}

func TestHealthz(t *testing.T) {
	resp, err := http.Get(stack.GatewayURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %s %s", resp.Status, body)
	}
}

func arenaWasm() []byte { return builtin.Arena }

// sharedCache is the compilation cache shared by test processes (see testenv),
// so the arena compiles once per machine rather than once per stack.
func sharedCache() string {
	_ = os.MkdirAll(testenv.WazeroCacheDir(), 0o755)
	return testenv.WazeroCacheDir()
}
