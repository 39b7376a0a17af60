package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/auth/clustercred"
	"ludus.dev/ludus/gateway"
	clusterv1 "ludus.dev/ludus/gen/ludus/cluster/v1"
	"ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/ops/devstack"
)

// benchClient is an h2c client; window bounds what each stream buffers.
func benchClient(window int) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	t := &http.Transport{Protocols: p}
	if window > 0 {
		t.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: window}
	}
	return &http.Client{Transport: t}
}

// noGzip: frames are measured as they are, without transport compression.
var noGzip = connect.WithAcceptCompression("gzip", nil, nil)

// benchGateway measures, on an in-process dev stack on loopback (one sim
// node, one arena game with three bots, a gateway without per-account limits):
// the latency the gateway adds to a frame (a spectator through the gateway
// next to one streaming directly from the node, same frames), and how many
// viewer streams one gateway holds and the memory each costs.
func benchGateway(ctx context.Context, progress io.Writer, res map[string]any) error {
	dir, err := os.MkdirTemp("", "ludus-bench-stream")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(progress, "starting a dev stack on loopback...")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	stack, err := devstack.Start(sctx, devstack.Config{HTTPAddr: "127.0.0.1:0", DataDir: dir, Nodes: 1, NoFsync: true, Logger: quiet})
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stack.Close(c)
		cancel()
	}()
	h2c := benchClient(0)
	gw, err := gateway.New(gateway.Config{
		Etcd: stack.Etcd, BackendURL: stack.BackendURL, ClusterToken: stack.ClusterToken, Logger: quiet,
		Verifier: auth.NewVerifier(auth.NewJWKSClient(stack.BackendURL+"/.well-known/jwks.json", auth.WithHTTPClient(h2c)), nil),
		// No per-account stream limit (the viewer streams share one account),
		// and input limits above the Play bench's highest rate (benchPlay).
		Limits: gateway.Limits{MaxStreamsPerAccount: -1, InputsPerSecond: playGatewayInputRate,
			InputBurst: playGatewayInputRate, MaxPendingInputs: playGatewayMaxPending},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gwCtx, stopGW := context.WithCancel(context.Background())
	gwDone := make(chan struct{})
	go func() { defer close(gwDone); _ = gateway.Serve(gwCtx, ln, gw.Handler(), nil, nil) }()
	defer func() { stopGW(); <-gwDone }()
	gwURL := "http://" + ln.Addr().String()

	authc := ludusv1connect.NewAuthServiceClient(h2c, gwURL, connect.WithGRPC())
	device := make([]byte, 8)
	_, _ = rand.Read(device)
	login, err := authc.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: devstack.DemoTenant, DeviceId: fmt.Sprintf("bench-%x", device), DisplayName: "bench"}))
	if err != nil {
		return err
	}
	ticket := login.Msg.Ticket
	games := ludusv1connect.NewGameServiceClient(h2c, gwURL, connect.WithGRPC(), noGzip, connect.WithInterceptors(bearer.Token(ticket)))
	created, err := games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 3}))
	if err != nil {
		return err
	}
	id := created.Msg.Game.GameId
	g, err := stack.Etcd.View().Game(ctx, stack.TenantID, id)
	if err != nil {
		return err
	}
	node, err := stack.Etcd.View().Node(ctx, g.Owner)
	if err != nil {
		return err
	}

	if err := benchLatency(ctx, progress, res, games, node.Addr, node.ID, stack.ClusterToken, stack.TenantID, id); err != nil {
		return err
	}
	if err := benchEtcdReadsPerInput(ctx, progress, res, games, gw, id); err != nil {
		return fmt.Errorf("etcd reads per input: %w", err)
	}
	if benchStreamPlay {
		if err := benchPlay(ctx, progress, res, authc, gwURL, id); err != nil {
			return fmt.Errorf("play: %w", err)
		}
	}
	return benchStreams(ctx, progress, res, gwURL, ticket, id)
}

// benchLatency: the same frames, read directly from the node and through the
// gateway (raw and deflate), by clients in this process; the gateway's added
// latency of a frame is the difference of its arrival times.
func benchLatency(ctx context.Context, progress io.Writer, res map[string]any, games ludusv1connect.GameServiceClient, nodeAddr, nodeID, token, tenant, id string) error {
	// The direct client calls the node as a gateway does, with the credential
	// derived for that node (nodes do not accept the raw cluster token).
	cred, err := clustercred.GatewayToNode(token, nodeID)
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "sampling the gateway's added latency for %v...\n", benchStreamLatency)
	ctx, cancel := context.WithTimeout(ctx, benchStreamLatency)
	defer cancel()
	type arrivals struct {
		mu sync.Mutex
		at map[int64]time.Time
	}
	record := func(a *arrivals, tick int64) {
		now := time.Now()
		a.mu.Lock()
		a.at[tick] = now
		a.mu.Unlock()
	}
	direct, raw, deflate := &arrivals{at: map[int64]time.Time{}}, &arrivals{at: map[int64]time.Time{}}, &arrivals{at: map[int64]time.Time{}}
	nodec := clusterv1connect.NewNodeServiceClient(benchClient(0), nodeAddr, connect.WithGRPC(), noGzip, connect.WithInterceptors(bearer.Token(cred)))
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Add(3)
	go func() {
		defer wg.Done()
		s, err := nodec.StreamFrames(ctx, connect.NewRequest(&clusterv1.StreamFramesRequest{TenantId: tenant, GameId: id, Spectator: true}))
		if err != nil {
			errs <- err
			return
		}
		defer s.Close()
		for s.Receive() {
			if f := s.Msg().GetFrame(); f != nil {
				record(direct, f.Tick)
			}
		}
		if err := s.Err(); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("direct stream from the node: %w", err)
		}
	}()
	for _, c := range []struct {
		a   *arrivals
		enc ludusv1.FrameEncoding
	}{{raw, ludusv1.FrameEncoding_FRAME_ENCODING_RAW}, {deflate, ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}} {
		go func() {
			defer wg.Done()
			s, err := games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id, AcceptEncodings: []ludusv1.FrameEncoding{c.enc}}))
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			for s.Receive() {
				if f := s.Msg().GetFrame(); f != nil {
					record(c.a, f.Tick)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for name, a := range map[string]*arrivals{"gateway_added_latency_us": raw, "gateway_added_latency_deflate_us": deflate} {
		var us []float64
		for tick, t := range a.at {
			if d, ok := direct.at[tick]; ok {
				us = append(us, float64(t.Sub(d).Nanoseconds())/1e3)
			}
		}
		if len(us) < 20 {
			return fmt.Errorf("only %d frames seen by both the direct and the gateway client", len(us))
		}
		sort.Float64s(us)
		res[name+"_p50"] = math.Round(us[len(us)/2])
		res[name+"_p99"] = math.Round(us[len(us)*99/100])
		res[name+"_frames"] = len(us)
	}
	return nil
}

// memInUse is the heap and goroutine stacks in use, after a collection.
func memInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// benchStreams opens up to benchStreamMax spectator streams (deflate, as
// browsers ask) against one game through one gateway: one in
// benchStreamFastEach reads every frame, the others read a frame every 2 s
// (slow clients, whose frames the node skips). The streams that are open and
// receiving after 6 s, and the memory of the process per stream, are reported.
func benchStreams(ctx context.Context, progress io.Writer, res map[string]any, gwURL, ticket, id string) error {
	n := benchStreamMax
	fmt.Fprintf(progress, "opening %d viewer streams against one gateway...\n", n)
	before, goBefore := memInUse(), runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// Slow clients buffer little (64 KiB per stream), as a phone on a slow link.
	slow, fast := benchClient(64<<10), benchClient(0)
	opts := []connect.ClientOption{connect.WithGRPC(), noGzip, connect.WithInterceptors(bearer.Token(ticket))}
	slowGames := ludusv1connect.NewGameServiceClient(slow, gwURL, opts...)
	fastGames := ludusv1connect.NewGameServiceClient(fast, gwURL, opts...)
	var open, failed, fastFrames, minTick, maxTick atomic.Int64
	minTick.Store(math.MaxInt64)
	var firstErr atomic.Value
	streamCtx, stopStreams := context.WithCancel(ctx)
	var wg sync.WaitGroup
	measuring := make(chan struct{})
	start := time.Now()
	for i := range n {
		isFast := benchStreamFastEach > 0 && i%benchStreamFastEach == 0
		c := slowGames
		if isFast {
			c = fastGames
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.Spectate(streamCtx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id,
				AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}}))
			if err == nil {
				defer s.Close()
				got := false
				for s.Receive() {
					if s.Msg().GetFrame() == nil {
						continue
					}
					if !got {
						got = true
						open.Add(1)
						defer open.Add(-1)
					}
					if isFast {
						select {
						case <-measuring:
							fastFrames.Add(1)
							tick := s.Msg().GetFrame().Tick
							for v := minTick.Load(); tick < v && !minTick.CompareAndSwap(v, tick); v = minTick.Load() {
							}
							for v := maxTick.Load(); tick > v && !maxTick.CompareAndSwap(v, tick); v = maxTick.Load() {
							}
						default:
						}
						continue
					}
					select {
					case <-streamCtx.Done():
						return
					case <-time.After(2 * time.Second):
					}
				}
				err = s.Err()
			}
			if err != nil && streamCtx.Err() == nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}()
		if i%100 == 99 {
			time.Sleep(50 * time.Millisecond) // open in waves, as real viewers arrive
		}
	}
	// Wait until every stream got its first frame (or failed), then hold 6 s.
	for open.Load()+failed.Load() < int64(n) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	opened := time.Since(start)
	close(measuring)
	time.Sleep(6 * time.Second)
	held := open.Load()
	after, goAfter := memInUse(), runtime.NumGoroutine()
	fastN := max(1, int64(n/max(benchStreamFastEach, 1)))
	stopStreams()
	wg.Wait()
	res["max_streams"] = held
	res["max_streams_tried"] = n
	res["max_streams_failed"] = failed.Load()
	res["max_streams_open_seconds"] = math.Round(opened.Seconds()*10) / 10
	if held > 0 {
		res["bytes_per_stream"] = int64(after-before) / held
		res["goroutines_per_stream"] = math.Round(float64(goAfter-goBefore)/float64(held)*10) / 10
	}
	res["fast_viewer_fps"] = math.Round(float64(fastFrames.Load())/float64(fastN)/6*10) / 10
	if lo, hi := minTick.Load(), maxTick.Load(); hi > lo {
		// The arena renders every 2nd tick: the frames the game rendered meanwhile.
		res["fast_viewer_game_fps"] = math.Round(float64(hi-lo)/2/6*10) / 10
	}
	if e := firstErr.Load(); e != nil {
		res["max_streams_first_error"] = fmt.Sprint(e)
	}
	return nil
}

// benchEtcdReadsPerInput sends unary inputs (20 in flight) through the
// gateway and reports how many etcd reads the gateway made per input
// (ludus_gateway_etcd_reads_total): routing reads the watched directory, so
// the goal is 0.
func benchEtcdReadsPerInput(ctx context.Context, progress io.Writer, res map[string]any, games ludusv1connect.GameServiceClient, gw *gateway.Gateway, id string) error {
	const inputs, inFlight = 400, 20
	fmt.Fprintf(progress, "sending %d inputs to count the gateway's etcd reads...\n", inputs)
	if _, err := games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		return err
	}
	reads := func() (float64, error) {
		mfs, err := gw.Registry().Gather()
		if err != nil {
			return 0, err
		}
		for _, mf := range mfs {
			if mf.GetName() == "ludus_gateway_etcd_reads_total" && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetCounter().GetValue(), nil
			}
		}
		return 0, errors.New("the gateway exports no ludus_gateway_etcd_reads_total")
	}
	before, err := reads()
	if err != nil {
		return err
	}
	var next atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq := next.Add(1)
				if seq > inputs {
					return
				}
				if _, err := games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: seq, Payload: []byte{byte(seq % 16)}})); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	after, err := reads()
	if err != nil {
		return err
	}
	res["gateway_etcd_reads_per_input"] = (after - before) / inputs
	return nil
}
