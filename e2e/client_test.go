package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/client"
	"ludus.dev/ludus/games/arena"
	"ludus.dev/ludus/games/builtin"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
	"ludus.dev/ludus/simnode/engine"
)

// Tests of the native Go client (package client) against the in-process stack:
// both delivery modes over Play, local renders identical to the node's, the
// fall back to pixels, and a handoff in snapshot mode.

// goClient signs a new guest of tenant in through the stack's gateway.
func goClient(t *testing.T, ctx context.Context, tenant string, opts ...client.Option) *client.Client {
	t.Helper()
	c := client.Dial(stack.GatewayURL, append([]client.Option{client.WithCompilationCache(sharedCache())}, opts...)...)
	t.Cleanup(func() { c.Close() })
	if _, err := c.GuestLogin(ctx, tenant, client.NewDeviceID(), "go-client"); err != nil {
		t.Fatal(err)
	}
	return c
}

// watcher reads everything a session delivers.
type watcher struct {
	s       *client.Session
	mu      sync.Mutex
	frames  []*client.Frame // the newest maxKept
	count   int
	acks    []client.Ack
	notices []client.Notice
	onFrame func(*client.Frame) // called on the reading goroutine, if set
}

const maxKept = 400

func watch(s *client.Session, onFrame func(*client.Frame)) *watcher {
	w := &watcher{s: s, onFrame: onFrame}
	go func() {
		for f := range s.Frames() {
			if w.onFrame != nil {
				w.onFrame(f)
			}
			w.mu.Lock()
			w.count++
			w.frames = append(w.frames, f)
			if len(w.frames) > maxKept {
				w.frames = w.frames[len(w.frames)-maxKept:]
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		for a := range s.Acks() {
			w.mu.Lock()
			w.acks = append(w.acks, a)
			w.mu.Unlock()
		}
	}()
	go func() {
		for n := range s.Notices() {
			w.mu.Lock()
			w.notices = append(w.notices, n)
			w.mu.Unlock()
		}
	}()
	return w
}

// waitFor polls cond (called with w.mu held) until it holds, the session
// ends or d passes.
func (w *watcher) waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-w.s.Done():
			t.Fatalf("waiting for %s: the session ended: %v (notices %v)", what, w.s.Err(), w.noticeList())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: timed out after %v; %d frames, stats %+v, notices %v", what, d, w.frameCount(), w.s.Stats(), w.noticeList())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *watcher) frameCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

func (w *watcher) last() *client.Frame {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.frames) == 0 {
		return nil
	}
	return w.frames[len(w.frames)-1]
}

func (w *watcher) noticeList() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.notices {
		out = append(out, n.String())
	}
	return out
}

func (w *watcher) hasNotice(k client.NoticeKind) bool {
	for _, n := range w.notices {
		if n.Kind == k {
			return true
		}
	}
	return false
}

// waitAck waits for the ack of input id and returns it.
func (w *watcher) waitAck(t *testing.T, id uint64, d time.Duration) client.Ack {
	t.Helper()
	var got client.Ack
	w.waitFor(t, fmt.Sprintf("ack of input %d", id), d, func() bool {
		for _, a := range w.acks {
			if a.Input >= id {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// TestClientPlaysBothModes: over Play, in snapshot mode (frames drawn locally
// by the module's ludus_render) and in pixel mode (frames drawn by the node),
// frames arrive as 320x200 indexed8 views, a turn changes many pixels while
// idle frames change few, and inputs are acknowledged.
func TestClientPlaysBothModes(t *testing.T) {
	for _, mode := range []client.Mode{client.Snapshots, client.Pixels} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			c := goClient(t, ctx, devstack.DemoTenant)
			// No bots: alone in the arena, the view only changes when we move.
			g, err := c.CreateGame(ctx, "arena", 0)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			s, err := c.Play(ctx, g.GameId, mode)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			setup := time.Since(t0)
			if s.Mode() != mode || s.Fallback() != nil {
				t.Fatalf("mode %v (fallback %v), want %v", s.Mode(), s.Fallback(), mode)
			}
			w := watch(s, nil)
			w.waitFor(t, "30 frames", 30*time.Second, func() bool { return w.count >= 30 })
			for _, f := range w.frames {
				if f.Local != (mode == client.Snapshots) || f.Format != "indexed8" {
					t.Fatalf("frame of tick %d: local %v, format %q in mode %v", f.Tick, f.Local, f.Format, mode)
				}
				if wd, ht, _, _, err := f.Indexed8(); err != nil || wd != 320 || ht != 200 {
					t.Fatalf("frame of tick %d: %dx%d, %v", f.Tick, wd, ht, err)
				}
			}
			w.mu.Lock()
			a, b := w.frames[len(w.frames)-2], w.frames[len(w.frames)-1]
			w.mu.Unlock()
			idle := viewDiff(a.View, b.View)

			before := w.last()
			id, err := s.Send([]byte{arena.BtnTurnLeft})
			if err != nil {
				t.Fatal(err)
			}
			ack := w.waitAck(t, id, 10*time.Second)
			w.waitFor(t, "frames 10 ticks after the turn", 10*time.Second, func() bool {
				return w.frames[len(w.frames)-1].Tick >= ack.Tick+10
			})
			turned := viewDiff(before.View, w.last().View)
			stop, err := s.Send([]byte{0})
			if err != nil {
				t.Fatal(err)
			}
			stopAck := w.waitAck(t, stop, 10*time.Second)
			if s.Acked() < stop || stopAck.Tick < ack.Tick {
				t.Fatalf("acked %d (tick %d), want %d after tick %d", s.Acked(), stopAck.Tick, stop, ack.Tick)
			}
			st := s.Stats()
			pixels := len(before.View) - 776
			t.Logf("%v: setup %v; %d frames, stats %+v; idle frames differ in %d pixels, the turn changed %d of %d; ack latency %v",
				mode, setup.Round(time.Millisecond), w.frameCount(), st, idle, turned, pixels, ack.Latency.Round(time.Millisecond))
			if turned < pixels/10 {
				t.Fatalf("turning changed only %d of %d pixels", turned, pixels)
			}
			if idle*4 > turned {
				t.Fatalf("the view changes about as much idle (%d) as when turning (%d)", idle, turned)
			}
			if st.BytesReceived == 0 || (mode == client.Snapshots) != (st.Rendered > 0) {
				t.Fatalf("stats %+v in mode %v", st, mode)
			}
		})
	}
}

// TestSnapshotsMatchPixels: a game's snapshot stream, drawn locally with the
// module's own ludus_render (as the Go client and the browser do), and its pixel
// stream, drawn by the node, give byte-identical frames for the same tick. It
// watches the spectator view: a player's slot has one controller at a time, and
// the spectator view goes through the same snapshot and render path.
func TestSnapshotsMatchPixels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p := protocols()[0]
	pl := login(t, p, devstack.DemoTenant)
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 3})) // bots: the view changes
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	eng, err := engine.New(ctx, engine.Config{CacheDir: sharedCache()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	m, err := eng.Compile(ctx, builtin.Arena)
	if err != nil {
		t.Fatal(err)
	}
	rend, err := m.NewRenderer(ctx, engine.InstanceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	local, node := map[int64][32]byte{}, map[int64][32]byte{}
	stream := func(delivery ludusv1.Delivery, into map[int64][32]byte, draw bool) error {
		s, err := pl.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id, Delivery: delivery,
			AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_RAW}}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
			f := s.Msg().GetFrame()
			if f == nil {
				continue
			}
			view := f.View
			if draw {
				if view, err = rend.Render(ctx, f.View); err != nil {
					return fmt.Errorf("render tick %d: %w", f.Tick, err)
				}
			}
			mu.Lock()
			into[f.Tick] = sha256.Sum256(view)
			mu.Unlock()
		}
		return nil
	}
	errs := make(chan error, 2)
	go func() { errs <- stream(ludusv1.Delivery_DELIVERY_SNAPSHOTS, local, true) }()
	go func() { errs <- stream(ludusv1.Delivery_DELIVERY_PIXELS, node, false) }()
	deadline := time.Now().Add(40 * time.Second)
	for {
		mu.Lock()
		same, differ, distinct := 0, 0, map[[32]byte]bool{}
		for tick, h := range node {
			if lh, ok := local[tick]; ok {
				if lh == h {
					same++
					distinct[h] = true
				} else {
					differ++
				}
			}
		}
		nl, nn := len(local), len(node)
		mu.Unlock()
		if differ > 0 {
			t.Fatalf("%d ticks drawn differently locally and by the node (%d the same)", differ, same)
		}
		if same >= 20 && len(distinct) >= 5 {
			t.Logf("%d ticks compared, all identical (%d distinct frames)", same, len(distinct))
			break
		}
		select {
		case err := <-errs:
			t.Fatalf("a stream ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d common ticks (%d distinct frames) after 40 s: %d local, %d node frames", same, len(distinct), nl, nn)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientOverTLS: an https:// gateway is spoken to over TLS, Play and the
// module fetch included (HTTP/2 by ALPN).
func TestClientOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg := startGateway(t, true, nil)
	c := client.Dial(tg.url, client.WithTLSConfig(&tls.Config{RootCAs: tg.pool}), client.WithCompilationCache(sharedCache()))
	defer c.Close()
	if _, err := c.GuestLogin(ctx, devstack.DemoTenant, client.NewDeviceID(), "go-client-tls"); err != nil {
		t.Fatal(err)
	}
	g, err := c.CreateGame(ctx, "arena", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Play(ctx, g.GameId, client.Auto)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != client.Snapshots {
		t.Fatalf("mode %v: %v", s.Mode(), s.Fallback())
	}
	w := watch(s, nil)
	id, err := s.Send([]byte{arena.BtnForward})
	if err != nil {
		t.Fatal(err)
	}
	w.waitAck(t, id, 20*time.Second)
	w.waitFor(t, "10 frames", 20*time.Second, func() bool { return w.count >= 10 })
	if !w.last().Local {
		t.Fatal("frames not drawn locally")
	}
}

// corruptModules flips a byte of every module the gateway serves.
type corruptModules struct{ next http.RoundTripper }

func (c corruptModules) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err != nil || !strings.HasPrefix(r.URL.Path, "/modules/") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if len(b) > 100 {
		b[100] ^= 0x01
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// TestClientFallsBackOnCorruptModule: a module whose bytes do not hash to its
// build id is refused before it runs, and the session plays in pixels.
func TestClientFallsBackOnCorruptModule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := client.DefaultHTTPClient(stack.GatewayURL)
	hc.Transport = corruptModules{next: hc.Transport}
	c := goClient(t, ctx, devstack.DemoTenant, client.WithHTTPClient(hc))
	g, err := c.CreateGame(ctx, "arena", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Module(ctx, g.BuildId); !errors.Is(err, client.ErrModuleMismatch) {
		t.Fatalf("corrupt module loaded: %v", err)
	}
	s, err := c.Play(ctx, g.GameId, client.Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Mode() != client.Pixels || !errors.Is(s.Fallback(), client.ErrModuleMismatch) {
		t.Fatalf("mode %v, fallback %v; want pixels because of the hash", s.Mode(), s.Fallback())
	}
	w := watch(s, nil)
	w.waitFor(t, "10 pixel frames and the fallback notice", 20*time.Second, func() bool {
		return w.count >= 10 && w.hasNotice(client.NoticeFallback)
	})
	if f := w.last(); f.Local || f.Format != "indexed8" {
		t.Fatalf("frame local %v format %q", f.Local, f.Format)
	}
	t.Logf("fell back: %v", s.Fallback())
}

// TestClientModuleWithoutRenderer: pong (a C module whose views are its own
// "pong-state-v1" format, no snapshot_format) plays in pixels whatever the
// client asks for: Auto quietly, Snapshots with a fall back.
func TestClientModuleWithoutRenderer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, stack.GatewayURL, connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	slug := fmt.Sprintf("goclient-%x", suffix)
	created, err := admin.CreateTenant(ctx, connect.NewRequest(&ludusv1.CreateTenantRequest{Slug: slug, Name: "Go client pong"}))
	if err != nil {
		t.Fatal(err)
	}
	key := created.Msg.AdminKey
	tenantAdmin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, stack.GatewayURL, connect.WithInterceptors(withTicket(&key)), connect.WithSendMaxBytes(64<<20))
	if _, err := tenantAdmin.UploadModule(ctx, connect.NewRequest(&ludusv1.UploadModuleRequest{Name: "pong", Wasm: builtin.Pong})); err != nil {
		t.Fatal(err)
	}
	c := goClient(t, ctx, slug)
	g, err := c.CreateGame(ctx, "pong", 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.SnapshotFormat != "" {
		t.Fatalf("pong declares snapshot_format %q", g.SnapshotFormat)
	}
	for _, mode := range []client.Mode{client.Auto, client.Snapshots} {
		s, err := c.Play(ctx, g.GameId, mode)
		if err != nil {
			t.Fatal(err)
		}
		if s.Mode() != client.Pixels || (mode == client.Snapshots) != (s.Fallback() != nil) {
			t.Fatalf("asked %v: mode %v, fallback %v", mode, s.Mode(), s.Fallback())
		}
		w := watch(s, nil)
		w.waitFor(t, "5 frames", 20*time.Second, func() bool { return w.count >= 5 })
		if f := w.last(); f.Local || f.Format != "pong-state-v1" || len(f.View) == 0 {
			t.Fatalf("asked %v: frame local %v format %q, %d bytes", mode, f.Local, f.Format, len(f.View))
		}
		t.Logf("asked %v: pixels; fallback: %v", mode, s.Fallback())
		s.Close()
	}
}

// TestClientSnapshotsAcrossHandoff: a snapshot-mode session keeps rendering
// frames locally while its game is handed to another node, and inputs sent
// during the move are all acknowledged.
func TestClientSnapshotsAcrossHandoff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := goClient(t, ctx, devstack.DemoTenant)
	g, err := c.CreateGame(ctx, "arena", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Play(ctx, g.GameId, client.Snapshots)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := watch(s, nil)
	w.waitFor(t, "5 frames", 30*time.Second, func() bool { return w.count >= 5 })

	fleetc := ludusv1connect.NewFleetServiceClient(h2cClient(), stack.GatewayURL, connect.WithGRPC(), connect.WithInterceptors(withTicket(&stack.OperatorKey)))
	moved := make(chan error, 1)
	go func() {
		_, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: g.GameId}))
		moved <- err
	}()
	var last uint64
	for i := 0; i < 10; i++ {
		if last, err = s.Send([]byte{byte(i % 4)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, "the re-attach", 30*time.Second, func() bool { return w.hasNotice(client.NoticeMigrated) })
	w.waitAck(t, last, 30*time.Second)
	after := w.frameCount()
	w.waitFor(t, "20 frames after the move", 30*time.Second, func() bool { return w.count >= after+20 })
	w.mu.Lock()
	recent := w.frames[len(w.frames)-20:]
	w.mu.Unlock()
	for i, f := range recent {
		if !f.Local || (i > 0 && f.Tick <= recent[i-1].Tick) {
			t.Fatalf("after the move: frame of tick %d local %v (previous tick %d)", f.Tick, f.Local, recent[max(i-1, 0)].Tick)
		}
	}
	if s.Mode() != client.Snapshots {
		t.Fatalf("fell back to pixels across the handoff: %v", s.Fallback())
	}
	st := s.Stats()
	if st.Migrations < 1 {
		t.Fatalf("stats %+v: no migration counted", st)
	}
	owner := ""
	if list, err := c.Games().ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{})); err == nil {
		for _, x := range list.Msg.Games {
			if x.GameId == g.GameId {
				owner = x.NodeId
			}
		}
	}
	t.Logf("handoff from %s to %s: notices %v; stats %+v", g.NodeId, owner, w.noticeList(), st)
}
