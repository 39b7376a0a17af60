package simnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/ops/fleet"
	"ludus.dev/ludus/simnode/engine"
)

var (
	talkerOnce sync.Once
	talkerWasm []byte
	talkerErr  error
)

// talker builds engine/testdata/talker, a Go SDK module whose config makes it
// print, fail or mutate its state in View.
func talker(t *testing.T) []byte {
	t.Helper()
	if testing.Short() {
		t.Skip("building a Go wasm module is slow")
	}
	talkerOnce.Do(func() {
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			gobin = "go"
		}
		dir, err := os.MkdirTemp("", "talker")
		if err != nil {
			talkerErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := filepath.Join(dir, "talker.wasm")
		cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-o", out, "./engine/testdata/talker")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			talkerErr = fmt.Errorf("%v: %v\n%s", cmd, err, msg)
			return
		}
		talkerWasm, talkerErr = os.ReadFile(out)
	})
	if talkerErr != nil {
		t.Fatal(talkerErr)
	}
	return talkerWasm
}

type talkerModules struct{ wasm []byte }

func (m talkerModules) FetchModule(_ context.Context, _, buildID string) ([]byte, error) {
	if buildID == engine.BuildID(m.wasm) {
		return m.wasm, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no module %s", buildID))
}

// startTalkerNode starts a node serving the talker module, logging to logger.
func startTalkerNode(t *testing.T, id string, logger *slog.Logger) (*Node, *httptest.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n, err := New(Config{ID: id, Addr: "http://" + ln.Addr().String(), Etcd: state, Engine: testEng, Modules: talkerModules{talker(t)},
		LeaseTTL: 3 * time.Second, FlushInterval: 50 * time.Millisecond, HashEvery: 5, FrameDropLateness: 200 * time.Millisecond,
		ClusterToken: testToken, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(n.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close(context.Background())
	})
	return n, srv
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func startTalker(t *testing.T, n *Node, config string) string {
	t.Helper()
	gameSeq++
	id := fmt.Sprintf("talk%d-%d", gameSeq, time.Now().UnixNano())
	if _, err := n.StartGame(context.Background(), clusterstate.GameSpec{TenantID: "tenant-talk", GameID: id,
		BuildID: engine.BuildID(talker(t)), Seed: 5, Config: []byte(config)}); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitStatus(t *testing.T, tenant, game string, ok func(clusterstate.Game) bool) clusterstate.Game {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, err := state.View().Game(context.Background(), tenant, game)
		if err == nil && ok(g) {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("game %s: last status %+v, %v", game, g.Status, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestModuleErrorsInTheirWords: a config the module refuses fails to start
// with the module's error text; a panic fails the match with the panic's
// message and tick in its status (what players and the archive see).
func TestModuleErrorsInTheirWords(t *testing.T) {
	n, _ := startTalkerNode(t, "n-words", nil)
	_, err := n.StartGame(context.Background(), clusterstate.GameSpec{TenantID: "tenant-talk", GameID: "refused",
		BuildID: engine.BuildID(talker(t)), Seed: 5, Config: []byte(`{"fail":"unknown map \"dust3\""}`)})
	if want := `module refused the config: unknown map "dust3" (Init returned 1)`; err == nil || err.Error() != want {
		t.Fatalf("StartGame: %v; want %q", err, want)
	}
	if connect.CodeOf(connectError(err)) != connect.CodeInvalidArgument {
		t.Fatalf("code %v", connect.CodeOf(connectError(err)))
	}

	id := startTalker(t, n, `{"panic_at":7}`)
	g := waitStatus(t, "tenant-talk", id, func(g clusterstate.Game) bool { return g.Status.Finished() })
	want := "match failed: module trapped at tick 7: talker: boom at tick 7 (wasm error: unreachable) (build " + engine.BuildID(talker(t))[:12] + ")"
	if g.Status.State != clusterstate.StateFailed || g.Status.Message != want {
		t.Fatalf("status %+v; want failed with %q", g.Status, want)
	}
}

// TestGuestLogLive: a game's guest log is readable live (follow) with ticks,
// and after the game ended; a chatty module's log stays bounded and says how
// many lines it dropped.
func TestGuestLogLive(t *testing.T) {
	n, srv := startTalkerNode(t, "n-guestlog", nil)
	ctrl := clusterv1connect.NewNodeControlServiceClient(h2cClient(), srv.URL, connect.WithInterceptors(bearer.Token(testToken)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := startTalker(t, n, `{"say":2,"panic_at":30}`)
	st, err := ctrl.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: "tenant-talk", GameId: id, Follow: true}))
	if err != nil {
		t.Fatal(err)
	}
	var lines []*ludusv1.GuestLogLine
	final := ""
	for st.Receive() {
		lines = append(lines, st.Msg().GetLog().Lines...)
		if st.Msg().GetLog().State != "" {
			final = st.Msg().GetLog().State + ": " + st.Msg().GetLog().Message
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(final, "failed: match failed: module trapped at tick 30") {
		t.Fatalf("final message %q", final)
	}
	// tick 0, 2, ... 28 on stdout, every other one a warning on stderr, then the panic.
	var got []string
	for _, l := range lines {
		if !l.Stderr || strings.HasPrefix(l.Text, "warn") {
			got = append(got, fmt.Sprintf("%d:%s", l.Tick, l.Text))
		}
	}
	if len(got) < 20 || got[0] != "0:tick 0" || got[1] != "0:warn 0" || got[2] != "2:tick 2" || got[len(got)-1] != "28:warn 28" {
		t.Fatalf("lines %v", got)
	}
	last := lines[len(lines)-1]
	if !strings.Contains(strings.Join(texts(lines), "\n"), "panic: talker: boom at tick 30") || last.Tick != 30 {
		t.Fatalf("the panic is not in the log at tick 30: %v", texts(lines[max(0, len(lines)-5):]))
	}
	for i, l := range lines {
		if l.Seq != uint64(i+1) || l.Time.AsTime().IsZero() {
			t.Fatalf("line %d: seq %d, time %v", i, l.Seq, l.Time.AsTime())
		}
	}

	// After the end, without follow: the same lines, from after_seq.
	after, err := ctrl.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: "tenant-talk", GameId: id, AfterSeq: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var again []*ludusv1.GuestLogLine
	for after.Receive() {
		again = append(again, after.Msg().GetLog().Lines...)
	}
	if after.Err() != nil || len(again) != len(lines)-3 || again[0].Seq != 4 {
		t.Fatalf("read after the end: %d lines (want %d), %v", len(again), len(lines)-3, after.Err())
	}

	// A chatty module: 40 lines of 100 bytes a tick.
	chatty := startTalker(t, n, `{"spam":40,"panic_at":80}`)
	waitStatus(t, "tenant-talk", chatty, func(g clusterstate.Game) bool { return g.Status.Finished() })
	r, err := ctrl.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: "tenant-talk", GameId: chatty}))
	if err != nil {
		t.Fatal(err)
	}
	var kept, skipped, dropped uint64
	bytes := 0
	for r.Receive() {
		kept += uint64(len(r.Msg().GetLog().Lines))
		skipped += r.Msg().GetLog().Skipped
		dropped = r.Msg().GetLog().Dropped
		for _, l := range r.Msg().GetLog().Lines {
			bytes += len(l.Text)
		}
	}
	total := uint64(40 * 80) // and the panic's lines
	if kept > GuestLogLines || bytes > GuestLogBytes || dropped == 0 || skipped != dropped || kept+dropped < total {
		t.Fatalf("kept %d lines (%d bytes), skipped %d, dropped %d of at least %d", kept, bytes, skipped, dropped, total)
	}

	if _, err := ctrl.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: "tenant-talk", GameId: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		// A server stream reports errors on Receive.
		s, _ := ctrl.GameLogs(ctx, connect.NewRequest(&clusterv1.GameLogsRequest{TenantId: "tenant-talk", GameId: "nope"}))
		for s.Receive() {
		}
		if connect.CodeOf(s.Err()) != connect.CodeNotFound {
			t.Fatalf("unknown game: %v", s.Err())
		}
	}
}

func texts(ls []*ludusv1.GuestLogLine) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Text
	}
	return out
}

// TestMatchLogLinesNameTheMatch: every record the node writes about a match
// carries tenant, game, build, tick and node.
func TestMatchLogLinesNameTheMatch(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, _ := startTalkerNode(t, "n-slog", logger)
	id := startTalker(t, n, `{"panic_at":4}`)
	waitStatus(t, "tenant-talk", id, func(g clusterstate.Game) bool { return g.Status.Finished() })
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if rec["game"] != id {
			continue
		}
		seen++
		for _, k := range []string{"tenant", "game", "build", "tick", "node"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("record %q lacks %q", rec["msg"], k)
			}
		}
	}
	if seen < 2 {
		t.Fatalf("%d records about the match:\n%s", seen, buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestHandoffDesyncFails: a module whose View changes its state runs fine on
// its first node, but the new owner's replay (which calls no View) desyncs.
// The operator's HandoffGame fails with the reason instead of "moved", and
// the game's status says desync, names the tick and the likely causes.
func TestHandoffDesyncFails(t *testing.T) {
	a, srvA := startTalkerNode(t, "n-desync-a", nil)
	startTalkerNode(t, "n-desync-b", nil)
	id := startTalker(t, a, `{"view":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A spectator makes the node call View every tick.
	nc := clusterv1connect.NewNodeServiceClient(h2cClient(), srvA.URL, connect.WithInterceptors(bearer.Token(testToken)))
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	fs, err := nc.StreamFrames(sctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: "tenant-talk", GameId: id, Spectator: true}))
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for frames < 20 && fs.Receive() {
		if fs.Msg().GetFrame() != nil {
			frames++
		}
	}
	if frames < 20 {
		t.Fatalf("%d frames: %v", frames, fs.Err())
	}
	time.Sleep(200 * time.Millisecond) // past a state hash and a flush

	const operator = "desync-operator-key"
	ctl := &fleet.Control{Etcd: state, OperatorKey: operator, ClusterToken: testToken, HTTPClient: h2cClient()}
	mux := http.NewServeMux()
	mux.Handle(ctl.Handler())
	fsrv := httptest.NewServer(mux)
	defer fsrv.Close()
	fc := ludusv1connect.NewFleetServiceClient(fsrv.Client(), fsrv.URL, connect.WithInterceptors(bearer.Token(operator)))
	_, err = fc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: "tenant-talk", GameId: id, TargetNodeId: "n-desync-b"}))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("HandoffGame: %v; want Aborted", err)
	}
	for _, want := range []string{"moved to node n-desync-b at tick", "then failed: match failed: node n-desync-b could not resume it: desync in game " + id, "at tick ", "a View or state hash that changes state"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("HandoffGame error %q lacks %q", err, want)
		}
	}
	g := waitStatus(t, "tenant-talk", id, func(g clusterstate.Game) bool { return g.Status.Finished() })
	if g.Status.State != clusterstate.StateFailed || !strings.Contains(g.Status.Message, "desync in game") || !strings.Contains(g.Status.Message, "ludus ctl module check") {
		t.Fatalf("status %+v", g.Status)
	}
}

type fakeDebugStore struct{}

func (fakeDebugStore) ArchivedGuestLog(_ context.Context, tenant, game string) (*ludusv1.GuestLog, string, string, error) {
	if game != "archived-one" {
		return nil, "", "", connect.NewError(connect.CodeNotFound, errors.New("no archive"))
	}
	return &ludusv1.GuestLog{Lines: []*ludusv1.GuestLogLine{{Seq: 1, Text: "old"}, {Seq: 2, Text: "older"}}, Dropped: 7}, "ended", "match ended", nil
}

func (fakeDebugStore) TenantBuild(context.Context, string, string) ([]byte, string, error) {
	return nil, "", connect.NewError(connect.CodeNotFound, errors.New("no build"))
}

// TestGameLogServiceProxies: studios read a game's guest log through fleet's
// GameLogService, which finds the node in etcd and proxies its stream; a game
// no longer in etcd is read from its archive; callers are authorized.
func TestGameLogServiceProxies(t *testing.T) {
	n, _ := startTalkerNode(t, "n-logsvc", nil)
	svc := &fleet.GameLogs{Etcd: state, ClusterToken: testToken, HTTPClient: h2cClient(), Store: fakeDebugStore{},
		Authorize: func(_ context.Context, h http.Header, _ string, write bool) (string, error) {
			if h.Get("Authorization") != "Bearer studio-key" || write {
				return "", connect.NewError(connect.CodeUnauthenticated, errors.New("bad key"))
			}
			return "tenant-talk", nil
		}}
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := ludusv1connect.NewGameLogServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(bearer.Token("studio-key")))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	read := func(c ludusv1connect.GameLogServiceClient, game string, follow bool) ([]*ludusv1.GameLogsResponse, error) {
		st, err := c.GameLogs(ctx, connect.NewRequest(&ludusv1.GameLogsRequest{GameId: game, Follow: follow}))
		if err != nil {
			return nil, err
		}
		var out []*ludusv1.GameLogsResponse
		for st.Receive() {
			out = append(out, st.Msg())
		}
		return out, st.Err()
	}

	id := startTalker(t, n, `{"say":1,"panic_at":12}`)
	msgs, err := read(c, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var lines []*ludusv1.GuestLogLine
	for _, m := range msgs {
		lines = append(lines, m.Lines...)
	}
	last := msgs[len(msgs)-1]
	if len(lines) < 12 || lines[0].Text != "tick 0" || last.State != clusterstate.StateFailed || last.NodeId != "n-logsvc" {
		t.Fatalf("%d lines, last message %v", len(lines), last)
	}

	msgs, err = read(c, "archived-one", false)
	if err != nil || len(msgs) != 1 || !msgs[0].Archived || len(msgs[0].Lines) != 2 || msgs[0].Dropped != 7 || msgs[0].State != "ended" {
		t.Fatalf("archived: %v %v", msgs, err)
	}
	if _, err := read(c, "no-such-game", false); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("unknown game: %v", err)
	}
	if _, err := read(c, "../x", false); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad id: %v", err)
	}
	bad := ludusv1connect.NewGameLogServiceClient(srv.Client(), srv.URL, connect.WithInterceptors(bearer.Token("wrong")))
	if _, err := read(bad, id, false); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("wrong key: %v", err)
	}
}

// TestGuestLogRing: the ring keeps the newest lines within both bounds, in
// order, and counts what it dropped; readers behind it are told how many
// lines they missed.
func TestGuestLogRing(t *testing.T) {
	l := newGuestLog()
	big := strings.Repeat("x", 1000)
	for i := range 3000 {
		text := fmt.Sprint(i)
		if i >= 1000 && i < 1400 {
			text = big // 400 KB of long lines: dropped for room, later for count
		}
		l.add(engine.OutputLine{Tick: int64(i), Text: text})
	}
	p := l.read(0, GuestLogLines)
	if len(p.lines) != GuestLogLines || p.lines[len(p.lines)-1].text != "2999" || p.dropped != 2000 || p.skipped != 2000 {
		t.Fatalf("%d lines, last %q, dropped %d, skipped %d", len(p.lines), p.lines[len(p.lines)-1].text, p.dropped, p.skipped)
	}
	bytes := 0
	for i, ln := range p.lines {
		bytes += len(ln.text)
		if ln.seq != 2001+uint64(i) {
			t.Fatalf("line %d has seq %d", i, ln.seq)
		}
	}
	if bytes > GuestLogBytes {
		t.Fatalf("%d bytes kept", bytes)
	}
	l2 := newGuestLog()
	for i := range 300 {
		l2.add(engine.OutputLine{Tick: int64(i), Text: big})
	}
	p = l2.read(0, GuestLogLines)
	if len(p.lines) != GuestLogBytes/len(big) || p.lines[0].seq+uint64(len(p.lines)) != 301 || p.dropped != uint64(300-len(p.lines)) {
		t.Fatalf("byte bound: %d lines from %d, dropped %d", len(p.lines), p.lines[0].seq, p.dropped)
	}
	l2.close("ended", "over")
	l2.add(engine.OutputLine{Text: "late"})
	if p := l2.read(300, 10); len(p.lines) != 0 || p.state != "ended" {
		t.Fatalf("after close: %+v", p)
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestGameLogServiceHidesNodeAddresses: when the node of a game cannot be
// reached, a tenant's caller is told so without the node's address (a dial
// error names it, and node addresses belong to the operator's network).
func TestGameLogServiceHidesNodeAddresses(t *testing.T) {
	n, _ := startTalkerNode(t, "n-logaddr", nil)
	refused := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("dial tcp 10.1.2.3:7000: connect: connection refused")
	})}
	svc := &fleet.GameLogs{Etcd: state, ClusterToken: testToken, HTTPClient: refused, Store: fakeDebugStore{},
		Authorize: func(context.Context, http.Header, string, bool) (string, error) { return "tenant-talk", nil }}
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := ludusv1connect.NewGameLogServiceClient(srv.Client(), srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := startTalker(t, n, `{"say":1}`)
	st, err := c.GameLogs(ctx, connect.NewRequest(&ludusv1.GameLogsRequest{GameId: id}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "cannot be reached") || strings.Contains(err.Error(), "10.1.2.3") {
		t.Fatalf("a node that cannot be reached: %v, want Unavailable without its address", err)
	}
}

// TestOversizedViewFailsTheMatch: a module whose ludus_view returns more
// than Config.MaxViewBytes fails its match, and the status says why, rather
// than every stream copying and sending it each frame.
func TestOversizedViewFailsTheMatch(t *testing.T) {
	n, srv := startTalkerNode(t, "n-bigview", nil)
	n.cfg.MaxViewBytes = 1024
	id := startTalker(t, n, `{"view_bytes":4096}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := clusterv1connect.NewNodeServiceClient(h2cClient(), srv.URL, connect.WithInterceptors(bearer.Token(testToken)))
	fs, err := nc.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: "tenant-talk", GameId: id, Spectator: true}))
	if err != nil {
		t.Fatal(err)
	}
	for fs.Receive() {
		if fs.Msg().GetFrame() != nil {
			t.Fatal("a frame of an oversized view was sent")
		}
	}
	g := waitStatus(t, "tenant-talk", id, func(g clusterstate.Game) bool { return g.Status.State == clusterstate.StateFailed })
	if !strings.Contains(g.Status.Message, "ludus_view(-1) returned 4096 bytes; a view may be at most 1024") {
		t.Fatalf("status message %q does not say why", g.Status.Message)
	}
}
