package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/games/builtin"
	"ludus.dev/ludus/gateway/framecodec"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/testenv"
	"ludus.dev/ludus/sdk/abi"
)

// A fake gateway: just enough of AuthService, GameService.JoinGame and Play,
// and GET /modules/, to drive a Session through what a real one may do.

type fakeGateway struct {
	region string // what Ping names
	ludusv1connect.UnimplementedGameServiceHandler
	ludusv1connect.UnimplementedAuthServiceHandler

	game            *ludusv1.GameInfo
	wasm            []byte                                   // served for every /modules/ path
	frameEvery      time.Duration                            // default 5 ms
	refuseSnapshots bool                                     // Play with snapshots: FailedPrecondition
	eventInputs     bool                                     // inputs apply in seq order from 1 (InputGap otherwise)
	ticketTTL       time.Duration                            // default 120 s
	dropAfterInput  atomic.Int32                             // streams to end with Unavailable after applying an input, unacked
	pingDelay       time.Duration                            // how long Ping takes to answer
	pingErr         error                                    // what Ping answers, if not nil
	matchmaker      ludusv1connect.MatchmakingServiceHandler // served too, if not nil
	pings           atomic.Int32
	// refusals: what the next Play streams are refused with, one each, in
	// order (then streams work).
	refusals []error
	joins    atomic.Int32

	moduleHits atomic.Int32
	refreshes  atomic.Int32
	tick       atomic.Int64 // the newest tick sent

	mu         sync.Mutex
	deliveries []ludusv1.Delivery // of every Play stream, in order
	lastSeq    uint64             // the player's last applied input
	applied    []uint64
}

func (f *fakeGateway) GuestLogin(ctx context.Context, req *connect.Request[ludusv1.GuestLoginRequest]) (*connect.Response[ludusv1.GuestLoginResponse], error) {
	ttl := f.ticketTTL
	if ttl == 0 {
		ttl = 120 * time.Second
	}
	return connect.NewResponse(&ludusv1.GuestLoginResponse{Ticket: "ticket-0", ExpiresAt: timestamppb.New(time.Now().Add(ttl)),
		AccountId: "a_1", DisplayName: req.Msg.DisplayName, RefreshToken: "refresh-0"}), nil
}

func (f *fakeGateway) Refresh(ctx context.Context, req *connect.Request[ludusv1.RefreshRequest]) (*connect.Response[ludusv1.RefreshResponse], error) {
	n := f.refreshes.Add(1)
	if req.Msg.RefreshToken != fmt.Sprintf("refresh-%d", n-1) || req.Msg.Tenant != "demo" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("bad refresh token"))
	}
	return connect.NewResponse(&ludusv1.RefreshResponse{Session: &ludusv1.Session{Ticket: fmt.Sprintf("ticket-%d", n),
		ExpiresAt: timestamppb.New(time.Now().Add(120 * time.Second)), RefreshToken: fmt.Sprintf("refresh-%d", n)}}), nil
}

func (f *fakeGateway) JoinGame(ctx context.Context, req *connect.Request[ludusv1.JoinGameRequest]) (*connect.Response[ludusv1.JoinGameResponse], error) {
	if !strings.HasPrefix(req.Header().Get("Authorization"), "Bearer ticket-") {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("no ticket"))
	}
	f.joins.Add(1)
	return connect.NewResponse(&ludusv1.JoinGameResponse{Game: f.game, Slot: 1}), nil
}

func (f *fakeGateway) Ping(ctx context.Context, req *connect.Request[ludusv1.PingRequest]) (*connect.Response[ludusv1.PingResponse], error) {
	f.pings.Add(1)
	time.Sleep(f.pingDelay)
	if f.pingErr != nil {
		return nil, f.pingErr
	}
	return connect.NewResponse(&ludusv1.PingResponse{ClientUnixNanos: req.Msg.ClientUnixNanos, ServerUnixNanos: time.Now().UnixNano(), Region: f.region}), nil
}

// pixelView is the fake node's drawing of tick: a 4x2 indexed8 frame.
func pixelView(tick int64) []byte {
	var pal [768]byte
	v := make([]byte, abi.Indexed8HeaderSize+8)
	px := abi.Indexed8Header(v, 4, 2, &pal)
	for i := range px {
		px[i] = byte(tick) + byte(i)
	}
	return v
}

func (f *fakeGateway) Play(ctx context.Context, st *connect.BidiStream[ludusv1.PlayRequest, ludusv1.PlayResponse]) error {
	first, err := st.Receive()
	if err != nil {
		return err
	}
	start := first.GetStart()
	f.mu.Lock()
	f.deliveries = append(f.deliveries, start.Delivery)
	var refusal error
	if len(f.refusals) > 0 {
		refusal, f.refusals = f.refusals[0], f.refusals[1:]
	}
	f.mu.Unlock()
	if refusal != nil {
		return refusal
	}
	snapshots := start.Delivery == ludusv1.Delivery_DELIVERY_SNAPSHOTS
	if snapshots && f.refuseSnapshots {
		// The node's words (simnode/views.go).
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("this game's module has no renderer (no snapshot_format in its metadata), so it can only stream pixels: ask for DELIVERY_PIXELS"))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sendMu sync.Mutex
	send := func(m *ludusv1.PlayResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(m)
	}
	delivery := "pixels"
	if snapshots {
		delivery = "snapshots"
	}
	if err := send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Status{Status: &ludusv1.Status{
		State: "running", ViewFormat: "indexed8", TickRate: 35, Delivery: delivery, BuildId: f.game.BuildId}}}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := st.Receive()
			if err != nil {
				return
			}
			in := m.GetInput()
			f.mu.Lock()
			if f.eventInputs && in.Seq != f.lastSeq+1 && in.Seq > f.lastSeq {
				ce := connect.NewError(connect.CodeAborted, fmt.Errorf("input %d was not applied: input %d never arrived", in.Seq, f.lastSeq+1))
				d, _ := connect.NewErrorDetail(&ludusv1.InputGap{MissingSeq: f.lastSeq + 1, RefusedSeq: in.Seq})
				ce.AddDetail(d)
				f.mu.Unlock()
				cancel(ce)
				return
			}
			if in.Seq > f.lastSeq {
				f.lastSeq = in.Seq
				f.applied = append(f.applied, in.Seq)
			}
			f.mu.Unlock()
			if f.dropAfterInput.Add(-1) >= 0 {
				cancel(connect.NewError(connect.CodeUnavailable, errors.New("the game is moving to another node")))
				return
			}
			if send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Ack{Ack: &ludusv1.InputAck{AckedSeq: in.Seq, Tick: f.tick.Load()}}}) != nil {
				return
			}
		}
	}()
	fs := framecodec.NewStream(start.AcceptEncodings)
	every := f.frameEvery
	if every == 0 {
		every = 5 * time.Millisecond
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
				return c
			}
			return nil
		case <-tk.C:
		}
		tick := f.tick.Add(1)
		view := pixelView(tick)
		if snapshots {
			view = binary.LittleEndian.AppendUint64([]byte("SNAP"), uint64(tick))
		}
		if err := fs.Send(&ludusv1.Frame{Tick: tick, View: view}, func(fr *ludusv1.Frame) error {
			return send(&ludusv1.PlayResponse{Msg: &ludusv1.PlayResponse_Frame{Frame: fr}})
		}); err != nil {
			return err
		}
	}
}

func (f *fakeGateway) playDeliveries() []ludusv1.Delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ludusv1.Delivery(nil), f.deliveries...)
}

// start serves f over HTTP/1.1 and h2c.
func (f *fakeGateway) start(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(ludusv1connect.NewGameServiceHandler(f))
	mux.Handle(ludusv1connect.NewAuthServiceHandler(f))
	if f.matchmaker != nil {
		mux.Handle(ludusv1connect.NewMatchmakingServiceHandler(f.matchmaker))
	}
	mux.HandleFunc("GET /modules/", func(w http.ResponseWriter, r *http.Request) {
		f.moduleHits.Add(1)
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ticket-") {
			http.Error(w, "no ticket", http.StatusUnauthorized)
			return
		}
		if f.wasm == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/wasm")
		_, _ = w.Write(f.wasm)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func buildID(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// arenaGame is a GameInfo of the built-in arena module.
func arenaGame() *ludusv1.GameInfo {
	return &ludusv1.GameInfo{GameId: "g1", ModuleName: "arena", BuildId: buildID(builtin.Arena), ViewFormat: "indexed8",
		SnapshotFormat: "arena-snap-v1", InputKind: "state", TickRate: 35, State: "running"}
}

// fakeRenderer draws a snapshot as a 4x2 frame; it fails the calls whose
// number fail says, and can be slow.
type fakeRenderer struct {
	calls *atomic.Int32
	fail  func(call int32) bool
	delay time.Duration
}

func (r *fakeRenderer) Render(ctx context.Context, snap []byte) ([]byte, error) {
	n := r.calls.Add(1)
	time.Sleep(r.delay)
	if r.fail != nil && r.fail(n) {
		return nil, fmt.Errorf("render %d: trap", n)
	}
	if len(snap) != 12 || string(snap[:4]) != "SNAP" {
		return nil, fmt.Errorf("render %d: not a fake snapshot: %q", n, snap)
	}
	return pixelView(int64(binary.LittleEndian.Uint64(snap[4:]))), nil
}

func (r *fakeRenderer) Close(context.Context) error { return nil }

// dialFake signs in to a fake gateway.
func dialFake(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	c := Dial(url, append([]Option{WithCompilationCache(testenv.WazeroCacheDir())}, opts...)...)
	t.Cleanup(func() { c.Close() })
	if _, err := c.GuestLogin(context.Background(), "demo", NewDeviceID(), "tester"); err != nil {
		t.Fatal(err)
	}
	return c
}

// frames reads n frames (or fails after d).
func frames(t *testing.T, s *Session, n int, d time.Duration) []*Frame {
	t.Helper()
	var out []*Frame
	timeout := time.After(d)
	for len(out) < n {
		select {
		case f, ok := <-s.Frames():
			if !ok {
				t.Fatalf("the session ended after %d frames: %v", len(out), s.Err())
			}
			out = append(out, f)
		case <-timeout:
			t.Fatalf("%d of %d frames after %v; stats %+v", len(out), n, d, s.Stats())
		}
	}
	return out
}

func noticesOf(s *Session) []Notice {
	var out []Notice
	for {
		select {
		case n, ok := <-s.Notices():
			if !ok {
				return out
			}
			out = append(out, n)
		default:
			return out
		}
	}
}

func TestClientModuleFetchChecksHash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := &fakeGateway{game: arenaGame()}
	url := f.start(t)
	c := dialFake(t, url)
	build := buildID(builtin.Arena)

	// Wrong bytes: refused before compiling, and not cached.
	f.wasm = append([]byte(nil), builtin.Arena...)
	f.wasm[len(f.wasm)/2] ^= 0xFF
	if _, err := c.Module(ctx, build); !errors.Is(err, ErrModuleMismatch) {
		t.Fatalf("corrupt module: %v, want ErrModuleMismatch", err)
	}
	if _, err := c.Module(ctx, "ABC"); err == nil || f.moduleHits.Load() != 1 {
		t.Fatalf("a malformed build id was fetched (%d hits): %v", f.moduleHits.Load(), err)
	}
	f.wasm = nil
	if _, err := c.Module(ctx, build); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing module: %v", err)
	}
	// The right bytes: compiled once, then from memory.
	f.wasm = builtin.Arena
	m, err := c.Module(ctx, build)
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasRenderer || m.BuildID != build {
		t.Fatalf("module %s has renderer %v", m.BuildID, m.HasRenderer)
	}
	hits := f.moduleHits.Load()
	if m2, err := c.Module(ctx, build); err != nil || m2 != m || f.moduleHits.Load() != hits {
		t.Fatalf("second load: %v, same %v, %d fetches", err, m2 == m, f.moduleHits.Load())
	}
}

func TestClientFallsBackOnCorruptModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame(), wasm: []byte("\x00asm not the arena")}
	c := dialFake(t, f.start(t))
	s, err := c.Play(ctx, "g1", Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != Pixels || !errors.Is(s.Fallback(), ErrModuleMismatch) {
		t.Fatalf("mode %v, fallback %v", s.Mode(), s.Fallback())
	}
	for _, fr := range frames(t, s, 5, 10*time.Second) {
		if fr.Local || fr.Format != "indexed8" {
			t.Fatalf("frame %+v", fr)
		}
	}
	if d := f.playDeliveries(); len(d) != 1 || d[0] != ludusv1.Delivery_DELIVERY_PIXELS {
		t.Fatalf("streams asked for %v", d)
	}
	if n := noticesOf(s); len(n) == 0 || n[0].Kind != NoticeFallback {
		t.Fatalf("notices %v", n)
	}
}

func TestClientFallsBackWhenRendererKeepsFailing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame()}
	c := dialFake(t, f.start(t))
	var calls, opened atomic.Int32
	c.openRenderer = func(ctx context.Context, build string) (frameRenderer, error) {
		opened.Add(1)
		return &fakeRenderer{calls: &calls, fail: func(int32) bool { return true }}, nil
	}
	s, err := c.Play(ctx, "g1", Auto)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, fr := range frames(t, s, 5, 10*time.Second) {
		if fr.Local {
			t.Fatalf("a failing renderer drew tick %d", fr.Tick)
		}
	}
	if s.Mode() != Pixels || s.Fallback() == nil || !strings.Contains(s.Fallback().Error(), "failed 3 times") {
		t.Fatalf("mode %v, fallback %v", s.Mode(), s.Fallback())
	}
	d := f.playDeliveries()
	if len(d) != 2 || d[0] != ludusv1.Delivery_DELIVERY_SNAPSHOTS || d[1] != ludusv1.Delivery_DELIVERY_PIXELS {
		t.Fatalf("streams asked for %v", d)
	}
	if st := s.Stats(); st.RenderFailures != 3 || opened.Load() != 3 || st.Reconnects != 1 {
		t.Fatalf("stats %+v, %d renderers", st, opened.Load())
	}
	var kinds []NoticeKind
	for _, n := range noticesOf(s) {
		kinds = append(kinds, n.Kind)
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]NoticeKind{NoticeRenderFailed, NoticeRenderFailed, NoticeFallback}) {
		t.Fatalf("notices %v", kinds)
	}
}

func TestClientReplacesFailedRenderer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame()}
	c := dialFake(t, f.start(t))
	var calls, opened atomic.Int32
	c.openRenderer = func(ctx context.Context, build string) (frameRenderer, error) {
		if build != f.game.BuildId {
			return nil, fmt.Errorf("renderer for build %q", build)
		}
		opened.Add(1)
		return &fakeRenderer{calls: &calls, fail: func(n int32) bool { return n == 3 }}, nil
	}
	s, err := c.Play(ctx, "g1", Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var prev int64
	for _, fr := range frames(t, s, 20, 10*time.Second) {
		if !fr.Local || fr.Tick <= prev || string(fr.View) != string(pixelView(fr.Tick)) {
			t.Fatalf("frame of tick %d (after %d): local %v", fr.Tick, prev, fr.Local)
		}
		prev = fr.Tick
	}
	if s.Mode() != Snapshots || opened.Load() != 2 || s.Stats().RenderFailures != 1 {
		t.Fatalf("mode %v, %d renderers, stats %+v", s.Mode(), opened.Load(), s.Stats())
	}
}

func TestClientFallsBackWhenGatewayRefusesSnapshots(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame(), refuseSnapshots: true}
	c := dialFake(t, f.start(t))
	c.openRenderer = func(ctx context.Context, build string) (frameRenderer, error) {
		return &fakeRenderer{calls: new(atomic.Int32)}, nil
	}
	s, err := c.Play(ctx, "g1", Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 3, 10*time.Second)
	if s.Mode() != Pixels || connect.CodeOf(s.Fallback()) != connect.CodeFailedPrecondition {
		t.Fatalf("mode %v, fallback %v", s.Mode(), s.Fallback())
	}
}

// TestClientSkipsToNewest: neither a slow consumer nor a slow renderer holds
// up the stream; both get the newest frame.
func TestClientSkipsToNewest(t *testing.T) {
	for _, mode := range []Mode{Pixels, Snapshots} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f := &fakeGateway{game: arenaGame(), frameEvery: 2 * time.Millisecond}
			c := dialFake(t, f.start(t))
			c.openRenderer = func(ctx context.Context, build string) (frameRenderer, error) {
				return &fakeRenderer{calls: new(atomic.Int32), delay: 40 * time.Millisecond}, nil
			}
			s, err := c.Play(ctx, "g1", mode)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			frames(t, s, 1, 10*time.Second)
			for i := 0; i < 3; i++ {
				time.Sleep(300 * time.Millisecond) // a slow consumer
				fr := frames(t, s, 1, 5*time.Second)[0]
				// Pixels: the frame waiting is at most one frame old when the
				// consumer comes back; snapshots: at most a render (40 ms) old.
				if lag := f.tick.Load() - fr.Tick; lag > 40 {
					t.Fatalf("the frame taken is %d ticks behind the stream", lag)
				}
			}
			st := s.Stats()
			t.Logf("%v: %+v", mode, st)
			// The consumer took 4 frames; the others were dropped, never queued.
			if st.FramesReceived < 50 || st.FramesDropped < st.FramesReceived-20 {
				t.Fatalf("frames were not skipped: %+v", st)
			}
			if mode == Snapshots && st.Rendered*2 > st.FramesReceived {
				t.Fatalf("the renderer drew every snapshot although it is slow: %+v", st)
			}
		})
	}
}

// TestClientInputGapRenumbers: an event game that saw no input of this player
// refuses the session's first seq (taken from the clock) with InputGap; the
// session re-sends from the missing seq and keeps its input numbers.
func TestClientInputGapRenumbers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := arenaGame()
	g.InputKind = "event"
	f := &fakeGateway{game: g, eventInputs: true}
	c := dialFake(t, f.start(t))
	s, err := c.Play(ctx, "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 1, 10*time.Second)
	for i := 1; i <= 3; i++ {
		if id, err := s.Send([]byte{byte(i)}); err != nil || id != uint64(i) {
			t.Fatalf("send %d: id %d, %v", i, id, err)
		}
	}
	timeout := time.After(10 * time.Second)
	for s.Acked() < 3 {
		select {
		case a := <-s.Acks():
			if a.Seq != a.Input {
				t.Fatalf("input %d acked as seq %d: not renumbered from 1", a.Input, a.Seq)
			}
		case <-timeout:
			t.Fatalf("acked %d of 3; notices %v", s.Acked(), noticesOf(s))
		}
	}
	f.mu.Lock()
	applied := fmt.Sprint(f.applied)
	f.mu.Unlock()
	if applied != "[1 2 3]" {
		t.Fatalf("applied %s", applied)
	}
}

func TestClientRefreshesTicket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame(), ticketTTL: 10 * time.Second}
	c := dialFake(t, f.start(t))
	if _, _, err := c.Join(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Ticket(ctx)
	if err != nil || tk != "ticket-1" || f.refreshes.Load() != 1 {
		t.Fatalf("ticket %q after %d refreshes: %v", tk, f.refreshes.Load(), err)
	}
	if tk, _ := c.Ticket(ctx); tk != "ticket-1" || f.refreshes.Load() != 1 {
		t.Fatalf("a fresh ticket was refreshed again: %q", tk)
	}
}

func TestClientSessionEndsWithContext(t *testing.T) {
	f := &fakeGateway{game: arenaGame()}
	c := dialFake(t, f.start(t))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Play(ctx, "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	frames(t, s, 2, 10*time.Second)
	cancel()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session outlived its context")
	}
	if !errors.Is(s.Err(), context.Canceled) {
		t.Fatalf("err %v", s.Err())
	}
	if _, err := s.Send([]byte{1}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("send after the end: %v", err)
	}
	for range s.Frames() {
	}
}

// TestClientResendsAfterUnavailable: a stream that ends with Unavailable
// before an input's ack is re-opened and the input re-sent with the same seq;
// the game applies it once and acknowledges it.
func TestClientResendsAfterUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame()}
	f.dropAfterInput.Store(1)
	c := dialFake(t, f.start(t))
	s, err := c.Play(ctx, "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 1, 10*time.Second)
	id, err := s.Send([]byte{4})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-s.Acks():
		f.mu.Lock()
		applied := append([]uint64(nil), f.applied...)
		f.mu.Unlock()
		if a.Input != id || len(applied) != 1 || applied[0] != a.Seq {
			t.Fatalf("ack %+v; the game applied %v", a, applied)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no ack; stats %+v, notices %v", s.Stats(), noticesOf(s))
	}
	frames(t, s, 3, 10*time.Second)
	if st := s.Stats(); st.Reconnects != 1 {
		t.Fatalf("stats %+v", st)
	}
	if n := noticesOf(s); len(n) != 1 || n[0].Kind != NoticeReconnecting || connect.CodeOf(n[0].Err) != connect.CodeUnavailable {
		t.Fatalf("notices %v", n)
	}
}

// A stream refused because the game ended meanwhile ends the session with
// ErrGameEnded (a failed game with errGameFailed and its reason), without
// taking the refusal for "no renderer": the session stays in snapshots.
func TestClientStreamRefusedForGameOver(t *testing.T) {
	for refusal, want := range map[string]error{
		"game g1 is ended":                   ErrGameEnded,
		"game g1 failed: node shutting down": errGameFailed,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f := &fakeGateway{game: arenaGame(), refusals: []error{connect.NewError(connect.CodeFailedPrecondition, errors.New(refusal))}}
		c := dialFake(t, f.start(t))
		c.openRenderer = func(ctx context.Context, build string) (frameRenderer, error) {
			return &fakeRenderer{calls: new(atomic.Int32)}, nil
		}
		s, err := c.Play(ctx, "g1", Snapshots)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Done():
		case <-ctx.Done():
			t.Fatalf("%q: the session did not end", refusal)
		}
		if !errors.Is(s.Err(), want) || s.Mode() != Snapshots || s.Fallback() != nil {
			t.Errorf("%q: ended with %v in mode %v (fallback %v), want %v in snapshots", refusal, s.Err(), s.Mode(), s.Fallback(), want)
		}
		if want == errGameFailed && !strings.Contains(s.Err().Error(), "node shutting down") {
			t.Errorf("%q: %v does not say why", refusal, s.Err())
		}
		s.Close()
		cancel()
	}
}

// A stream refused because the game gave the player's seat up (30 s without
// a stream) makes the session take the seat again and go on.
func TestClientRejoinsAfterTheSeatWasDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := &fakeGateway{game: arenaGame(), refusals: []error{connect.NewError(connect.CodeFailedPrecondition,
		errors.New("join the game before sending input or streaming its frames"))}}
	c := dialFake(t, f.start(t))
	s, err := c.Play(ctx, "g1", Pixels)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frames(t, s, 3, 10*time.Second)
	if n := f.joins.Load(); n != 2 {
		t.Fatalf("JoinGame called %d times, want 2 (Play, then after the refusal)", n)
	}
}
