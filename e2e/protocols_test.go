package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"ludus.dev/ludus/auth"
	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/ops/devstack"
)

// testGateway is an extra gateway in front of the shared stack, with its own
// configuration and, optionally, TLS; it serves on 127.0.0.1 only.
type testGateway struct {
	url  string
	gw   *gateway.Gateway
	pool *x509.CertPool // trusts the gateway's certificate when it serves TLS
}

func startGateway(t *testing.T, withTLS bool, edit func(*gateway.Config)) *testGateway {
	t.Helper()
	h2c := &http.Client{Transport: gateway.H2CTransport()}
	cfg := gateway.Config{
		Etcd:         stack.Etcd,
		Verifier:     auth.NewVerifier(auth.NewJWKSClient(stack.BackendURL+"/.well-known/jwks.json", auth.WithHTTPClient(h2c)), nil),
		BackendURL:   stack.BackendURL,
		ClusterToken: stack.ClusterToken,
	}
	if edit != nil {
		edit(&cfg)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &testGateway{gw: gw, url: "http://" + ln.Addr().String()}
	var tlsConfig *tls.Config
	if withTLS {
		cert, pool := selfSigned(t)
		tlsConfig, tg.pool = gateway.TLSConfig(cert), pool
		tg.url = "https://" + ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gateway.Serve(ctx, ln, gw.Handler(), tlsConfig, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tg
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ludus test gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// protoRecorder records the HTTP version of every response it sees.
type protoRecorder struct {
	next  http.RoundTripper
	major atomic.Int32
}

func (p *protoRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(r)
	if resp != nil {
		p.major.Store(int32(resp.ProtoMajor))
	}
	return resp, err
}

// transport is one way to reach a gateway: HTTP/1.1 or HTTP/2, TLS or not.
type transport struct {
	name  string
	http2 bool
	tls   bool
}

var transports = []transport{
	{"http1", false, false}, {"h2c", true, false}, {"tls-http1", false, true}, {"tls-h2", true, true},
}

// client returns an HTTP client for tg over tr, and the recorder of the
// versions its responses came with.
func (tr transport) client(tg *testGateway) (*http.Client, *protoRecorder) {
	p := new(http.Protocols)
	switch {
	case tr.http2 && tr.tls:
		p.SetHTTP2(true)
	case tr.http2:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	t := &http.Transport{Protocols: p, ForceAttemptHTTP2: tr.http2}
	if tr.tls {
		t.TLSClientConfig = &tls.Config{RootCAs: tg.pool}
	}
	rec := &protoRecorder{next: t}
	return &http.Client{Transport: rec}, rec
}

// loginAt signs a guest in through gateway url and returns its game client.
func loginAt(t *testing.T, hc *http.Client, url string, opts ...connect.ClientOption) *player {
	t.Helper()
	authc := ludusv1connect.NewAuthServiceClient(hc, url, opts...)
	device := make([]byte, 16)
	_, _ = rand.Read(device)
	resp, err := authc.GuestLogin(context.Background(), connect.NewRequest(&ludusv1.GuestLoginRequest{
		Tenant: devstack.DemoTenant, DeviceId: fmt.Sprintf("dev-%x", device), DisplayName: "proto-tester"}))
	if err != nil {
		t.Fatalf("guest login at %s: %v", url, err)
	}
	pl := &player{ticket: resp.Msg.Ticket, account: resp.Msg.AccountId}
	pl.games = ludusv1connect.NewGameServiceClient(hc, url, append(append([]connect.ClientOption{}, opts...), connect.WithInterceptors(withTicket(&pl.ticket)))...)
	return pl
}

// sharedGame creates a game with bots through the stack's gateway.
func sharedGame(t *testing.T, ctx context.Context, bots int32) (*player, string) {
	t.Helper()
	pl := login(t, protocols()[1], devstack.DemoTenant)
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: bots}))
	if err != nil {
		t.Fatal(err)
	}
	return pl, g.Msg.Game.GameId
}

// TestProtocolMatrix: Connect, gRPC and gRPC-Web clients over HTTP/1.1 and
// HTTP/2, plaintext (h2c) and TLS (ALPN), sign in through the gateway's
// pass-through, ping, list games and receive frames. gRPC needs HTTP/2.
func TestProtocolMatrix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, id := sharedGame(t, ctx, 2)
	plain, secure := startGateway(t, false, nil), startGateway(t, true, nil)
	for _, tr := range transports {
		tg := plain
		if tr.tls {
			tg = secure
		}
		for _, p := range []struct {
			name string
			opts []connect.ClientOption
		}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}} {
			if p.name == "grpc" && !tr.http2 {
				continue // gRPC is HTTP/2 only
			}
			t.Run(tr.name+"/"+p.name, func(t *testing.T) {
				hc, rec := tr.client(tg)
				pl := loginAt(t, hc, tg.url, p.opts...)
				sent := time.Now().UnixNano()
				pong, err := pl.games.Ping(ctx, connect.NewRequest(&ludusv1.PingRequest{ClientUnixNanos: sent}))
				if err != nil {
					t.Fatal(err)
				}
				rtt := time.Duration(time.Now().UnixNano() - sent)
				if pong.Msg.ClientUnixNanos != sent || pong.Msg.ServerUnixNanos < sent {
					t.Fatalf("ping echoed %+v for %d", pong.Msg, sent)
				}
				if _, err := pl.games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{})); err != nil {
					t.Fatal(err)
				}
				spec, err := pl.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id,
					AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_DEFLATE}}))
				if err != nil {
					t.Fatal(err)
				}
				defer spec.Close()
				frames := 0
				for frames < 3 && spec.Receive() {
					if f := spec.Msg().GetFrame(); f != nil {
						if frames == 0 && !f.Keyframe {
							t.Fatal("first frame is not a keyframe")
						}
						frames++
					}
				}
				if frames < 3 {
					t.Fatalf("got %d frames: %v", frames, spec.Err())
				}
				want := int32(1)
				if tr.http2 {
					want = 2
				}
				if got := rec.major.Load(); got != want {
					t.Fatalf("responses came over HTTP/%d, want HTTP/%d", got, want)
				}
				t.Logf("%s/%s: ping rtt %v", tr.name, p.name, rtt)
			})
		}
	}
}

// playSession is an open Play stream and what it received.
type playSession struct {
	stream *connect.BidiStreamForClient[ludusv1.PlayRequest, ludusv1.PlayResponse]
	mu     sync.Mutex
	frames int
	acked  uint64
	status []*ludusv1.Status
	done   chan struct{}
	err    error
}

func openPlay(t *testing.T, ctx context.Context, pl *player, id string) *playSession {
	t.Helper()
	s := &playSession{stream: pl.games.Play(ctx), done: make(chan struct{})}
	if err := s.stream.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: id,
		AcceptEncodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD}}}}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		for {
			m, err := s.stream.Receive()
			if err != nil {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
				return
			}
			s.mu.Lock()
			switch {
			case m.GetFrame() != nil:
				s.frames++
			case m.GetAck() != nil:
				s.acked = max(s.acked, m.GetAck().AckedSeq)
			case m.GetStatus() != nil:
				s.status = append(s.status, m.GetStatus())
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *playSession) input(t *testing.T, seq uint64, payload byte) {
	t.Helper()
	if err := s.stream.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: seq, Payload: []byte{payload}}}}); err != nil {
		t.Fatalf("send input %d: %v", seq, err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func (s *playSession) waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		ok, err := cond(), s.err
		s.mu.Unlock()
		if ok {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("waiting for %s: frames=%d acked=%d err=%v", what, s.frames, s.acked, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPlayBidi: a native client's one bidirectional stream carries inputs up
// and frames, status and acks down, over h2c and TLS (and gRPC and Connect);
// when the game is handed to another node mid-stream, the stream re-attaches
// and inputs sent during the move are delivered to the new owner. Over HTTP/1.1
// Play is refused with a clear message.
func TestPlayBidi(t *testing.T) {
	plain, secure := startGateway(t, false, nil), startGateway(t, true, nil)
	cases := []struct {
		name    string
		tg      *testGateway
		tr      transport
		opts    []connect.ClientOption
		handoff bool
	}{
		{"h2c-grpc", plain, transports[1], []connect.ClientOption{connect.WithGRPC()}, true},
		{"h2c-connect", plain, transports[1], nil, false},
		{"tls-h2-grpc", secure, transports[3], []connect.ClientOption{connect.WithGRPC()}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			hc, _ := tc.tr.client(tc.tg)
			pl := loginAt(t, hc, tc.tg.url, tc.opts...)
			g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
			if err != nil {
				t.Fatal(err)
			}
			id, from := g.Msg.Game.GameId, g.Msg.Game.NodeId
			if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
				t.Fatal(err)
			}
			s := openPlay(t, ctx, pl, id)
			defer s.stream.CloseResponse()
			s.waitFor(t, "5 frames", 20*time.Second, func() bool { return s.frames >= 5 })
			for seq := uint64(1); seq <= 3; seq++ {
				s.input(t, seq, 1<<2)
			}
			s.waitFor(t, "ack of input 3", 10*time.Second, func() bool { return s.acked >= 3 })
			if !tc.handoff {
				return
			}
			fleetc := ludusv1connect.NewFleetServiceClient(h2cClient(), stack.GatewayURL, connect.WithGRPC(), connect.WithInterceptors(withTicket(&stack.OperatorKey)))
			moved := make(chan error, 1)
			go func() {
				_, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: stack.TenantID, GameId: id}))
				moved <- err
			}()
			// Inputs keep coming while the game moves; none may be lost.
			for seq := uint64(4); seq <= 12; seq++ {
				s.input(t, seq, byte(seq%4))
				time.Sleep(30 * time.Millisecond)
			}
			if err := <-moved; err != nil {
				t.Fatal(err)
			}
			s.waitFor(t, "ack of input 12", 30*time.Second, func() bool { return s.acked >= 12 })
			s.waitFor(t, "re-attach status", 30*time.Second, func() bool {
				for _, st := range s.status {
					if st.PreviousNodeId != "" {
						t.Logf("re-attached from %s to %s in %d ms (game created on %s)", st.PreviousNodeId, st.NodeId, st.MigrationMs, from)
						return true
					}
				}
				return false
			})
			before := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.frames }()
			s.waitFor(t, "frames after the move", 20*time.Second, func() bool { return s.frames >= before+5 })
			body := scrape(t, metricsURL(t, tc.tg), hc)
			if !strings.Contains(body, `ludus_gateway_reattaches_total{tenant="`+stack.TenantID+`"} 1`) ||
				!strings.Contains(body, "ludus_gateway_reattach_duration_seconds_count") {
				t.Fatalf("re-attach not in the metrics:\n%s", grepLines(body, "reattach"))
			}
		})
	}
	t.Run("http1-refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		hc, _ := transports[0].client(plain)
		pl := loginAt(t, hc, plain.url)
		st := pl.games.Play(ctx)
		_ = st.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: "x"}}})
		_, err := st.Receive()
		if err == nil || !strings.Contains(err.Error(), "505") {
			t.Fatalf("Play over HTTP/1.1: %v", err)
		}
		// What a curl user sees.
		req, _ := http.NewRequestWithContext(ctx, "POST", plain.url+ludusv1connect.GameServicePlayProcedure, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/connect+json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusHTTPVersionNotSupported || !strings.Contains(string(b), "needs HTTP/2") {
			t.Fatalf("raw HTTP/1.1 Play: %s %q", resp.Status, b)
		}
	})
}

func scrape(t *testing.T, url string, hc *http.Client) string {
	t.Helper()
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSlowClientDoesNotSlowFastOne: a spectator that reads one frame every
// 400 ms skips frames and still gets recent ones, while a fast spectator of the
// same game keeps the full frame rate (17.5 frames/s for the arena).
func TestSlowClientDoesNotSlowFastOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg := startGateway(t, false, nil)
	_, id := sharedGame(t, ctx, 3)
	fastHC, _ := transports[1].client(tg)
	// The slow client takes little into its buffers, as a slow phone would.
	slowT := &http.Transport{Protocols: new(http.Protocols), HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10}}
	slowT.Protocols.SetUnencryptedHTTP2(true)
	slowHC := &http.Client{Transport: slowT}
	// Without gzip its raw frames fill its window: it is slow on the wire.
	fast, slow := loginAt(t, fastHC, tg.url, connect.WithGRPC()), loginAt(t, slowHC, tg.url, connect.WithGRPC(), connect.WithAcceptCompression("gzip", nil, nil))
	raw := []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_RAW}
	fs, err := fast.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id, AcceptEncodings: raw}))
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	ss, err := slow.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id, AcceptEncodings: raw}))
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()

	var latest atomic.Int64 // newest tick the fast client has seen
	type result struct{ frames, first, last int64 }
	fastDone := make(chan result, 1)
	go func() {
		var r result
		start := time.Time{}
		for fs.Receive() {
			f := fs.Msg().GetFrame()
			if f == nil {
				continue
			}
			latest.Store(f.Tick)
			if start.IsZero() {
				start, r.first = time.Now(), f.Tick
			}
			r.frames++
			r.last = f.Tick
			if time.Since(start) > 4*time.Second {
				break
			}
		}
		fastDone <- r
	}()
	var lags []int64
	slowFrames, prev, skipped := 0, int64(0), int64(0)
	for slowFrames < 12 && ss.Receive() {
		f := ss.Msg().GetFrame()
		if f == nil {
			continue
		}
		slowFrames++
		if prev != 0 && f.Tick-prev > 2 {
			skipped += (f.Tick-prev)/2 - 1
		}
		prev = f.Tick
		if slowFrames > 3 { // once the buffers on the way are full
			lags = append(lags, latest.Load()-f.Tick)
		}
		time.Sleep(400 * time.Millisecond)
	}
	r := <-fastDone
	// The arena renders every 2nd tick: the game produced this many frames while
	// the fast client watched (on a loaded machine the game itself may run late;
	// what matters is that the fast client misses none of them).
	rendered := (r.last-r.first)/2 + 1
	t.Logf("fast spectator: %d of %d frames rendered over ticks %d..%d; slow one: %d frames, %d skipped, lag behind the fast one in ticks %v",
		r.frames, rendered, r.first, r.last, slowFrames, skipped, lags)
	if rendered < 20 || r.frames*10 < rendered*9 {
		t.Fatalf("the fast spectator got %d of %d frames while a slow one was connected", r.frames, rendered)
	}
	if skipped == 0 {
		t.Fatal("the slow spectator skipped no frames")
	}
	// Frames wait in the HTTP/2 windows on the way (node→gateway 128 KiB,
	// gateway→client 64 KiB, one frame blocked in each sender): once those are
	// full the node skips for the slow stream, so its lag stops growing.
	if n := len(lags); n < 4 || lags[n-1]-lags[n-3] > 8 || lags[n-1] > 3*35 {
		t.Fatalf("slow spectator's lag behind the game keeps growing or is over 3 s (%v ticks): it gets stale frames, not the newest", lags)
	}
	body := scrape(t, metricsURL(t, tg), fastHC)
	if !strings.Contains(body, "ludus_gateway_stream_frames_skipped_total{kind=\"spectator\",tenant=\""+stack.TenantID+"\"}") ||
		!strings.Contains(body, "ludus_gateway_active_streams{kind=\"spectator\",tenant=\""+stack.TenantID+"\"} 2") ||
		!strings.Contains(body, "ludus_gateway_stream_bytes_total{kind=\"spectator\"") {
		t.Fatalf("stream metrics missing:\n%s", grepLines(body, "ludus_gateway"))
	}
}

// TestLimits: every gateway limit, exceeded, fails with the right code and a
// message saying which limit.
func TestLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg := startGateway(t, false, func(c *gateway.Config) {
		c.Limits = gateway.Limits{MaxStreamsPerAccount: 2, InputsPerSecond: 2, InputBurst: 3, MaxMessageBytes: 8 << 10}
	})
	hc, _ := transports[1].client(tg)
	pl := loginAt(t, hc, tg.url, connect.WithGRPC())
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error, code connect.Code, msg string) {
		t.Helper()
		if connect.CodeOf(err) != code || !strings.Contains(err.Error(), msg) {
			t.Fatalf("%s: got %v, want %v mentioning %q", what, err, code, msg)
		}
		t.Logf("%s: %v", what, err)
	}

	t.Run("streams", func(t *testing.T) {
		var open []*connect.ServerStreamForClient[ludusv1.SpectateResponse]
		defer func() {
			for _, s := range open {
				s.Close()
			}
		}()
		for range 2 {
			s, err := pl.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id}))
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, s)
			if !s.Receive() {
				t.Fatal(s.Err())
			}
		}
		s, err := pl.games.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: id}))
		if err == nil {
			s.Receive()
			err = s.Err()
			s.Close()
		}
		check("third stream", err, connect.CodeResourceExhausted, "limit is 2")
		play := pl.games.Play(ctx)
		_ = play.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: id}}})
		_, err = play.Receive()
		check("third stream (Play)", err, connect.CodeResourceExhausted, "too many open streams")
		play.CloseResponse()
		// Closing one frees its slot.
		open[0].Close()
		open = open[1:]
		deadline := time.Now().Add(5 * time.Second)
		for {
			s, err := pl.games.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: id}))
			if err == nil && s.Receive() {
				open = append(open, s)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("slot not freed: %v", s.Err())
			}
			s.Close()
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("input-rate", func(t *testing.T) {
		other := loginAt(t, hc, tg.url, connect.WithGRPC())
		if _, err := other.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
			t.Fatal(err)
		}
		var err error
		for seq := uint64(1); seq <= 6 && err == nil; seq++ {
			_, err = other.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: seq, Payload: []byte{1}}))
		}
		check("SendInput burst", err, connect.CodeResourceExhausted, "inputs per second")
		// A Play stream shares the account's bucket and ends when it is exceeded.
		time.Sleep(1500 * time.Millisecond) // three tokens back
		s := openPlay(t, ctx, other, id)
		defer s.stream.CloseResponse()
		for seq := uint64(10); seq < 20; seq++ {
			if s.stream.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: seq, Payload: []byte{1}}}}) != nil {
				break
			}
		}
		<-s.done
		check("Play input burst", s.err, connect.CodeResourceExhausted, "inputs per second")
	})

	t.Run("sizes", func(t *testing.T) {
		_, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Config: bytes.Repeat([]byte(" "), 10<<10)}))
		check("10 KiB message", err, connect.CodeResourceExhausted, "")
		_, err = pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Config: bytes.Repeat([]byte(" "), 5<<10)}))
		check("5 KiB config", err, connect.CodeInvalidArgument, "4096")
		_, err = pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 100, Payload: make([]byte, 300)}))
		check("300-byte input", err, connect.CodeInvalidArgument, "256")
		_, err = pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 0, Payload: []byte{1}}))
		check("seq 0", err, connect.CodeInvalidArgument, "seq")
	})
}

// TestMalformedMessages: bytes that are not the message they claim to be are
// refused with InvalidArgument (bad protobuf, bad JSON, a Play stream that does
// not start with PlayStart) and oversized envelopes with ResourceExhausted.
func TestMalformedMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := startGateway(t, false, nil)
	hc, _ := transports[1].client(tg)
	pl := loginAt(t, hc, tg.url)
	post := func(ctype string, body []byte) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", tg.url+ludusv1connect.GameServiceListGamesProcedure, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+pl.ticket)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("application/proto", []byte{0xff, 0xff, 0xff, 0xff}); code != 400 || !strings.Contains(body, "invalid_argument") {
		t.Fatalf("garbage protobuf: %d %s", code, body)
	}
	if code, body := post("application/json", []byte("{not json")); code != 400 || !strings.Contains(body, "invalid_argument") {
		t.Fatalf("garbage JSON: %d %s", code, body)
	}
	if code, body := post("application/json", bytes.Repeat([]byte(" "), 100<<10)); code != 429 || !strings.Contains(body, "resource_exhausted") {
		t.Fatalf("100 KiB body: %d %s", code, body)
	}
	// A gRPC envelope announcing 1 MiB is refused before it is read.
	env := []byte{0, 0, 0x10, 0, 0}
	req, _ := http.NewRequestWithContext(ctx, "POST", tg.url+ludusv1connect.GameServiceListGamesProcedure, bytes.NewReader(env))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Authorization", "Bearer "+pl.ticket)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if st := resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status"); st != "8" {
		t.Fatalf("1 MiB gRPC envelope: grpc-status %q (%s)", st, resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"))
	}
	play := pl.games.Play(ctx)
	_ = play.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: 1}}})
	_, err = play.Receive()
	wantCode(t, err, connect.CodeInvalidArgument)
	play.CloseResponse()
	play = pl.games.Play(ctx)
	_ = play.CloseRequest()
	_, err = play.Receive()
	wantCode(t, err, connect.CodeInvalidArgument)
	play.CloseResponse()
}

// TestHealthReflectionCORS: the gRPC health service answers SERVING, server
// reflection lists the services (what grpcurl uses), and a gateway configured
// with browser origins answers CORS preflights for Connect and gRPC-Web.
func TestHealthReflectionCORS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := startGateway(t, false, func(c *gateway.Config) { c.CORSOrigins = []string{"https://play.example.com"} })
	hc, _ := transports[1].client(tg)
	for _, svc := range []string{"", ludusv1connect.GameServiceName} {
		resp, err := grpchealth.NewClient(hc, tg.url, connect.WithGRPC()).Check(ctx, &grpchealth.CheckRequest{Service: svc})
		if err != nil || resp.Status != grpchealth.StatusServing {
			t.Fatalf("health of %q: %+v %v", svc, resp, err)
		}
	}
	tg.gw.SetServing(false)
	resp, err := grpchealth.NewClient(hc, tg.url, connect.WithGRPC()).Check(ctx, &grpchealth.CheckRequest{})
	if err != nil || resp.Status != grpchealth.StatusNotServing {
		t.Fatalf("health while draining: %+v %v", resp, err)
	}
	tg.gw.SetServing(true)

	rs := grpcreflect.NewClient(hc, tg.url).NewStream(ctx)
	names, err := rs.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(names)
	for _, want := range []string{ludusv1connect.GameServiceName, ludusv1connect.AuthServiceName, grpchealth.HealthV1ServiceName} {
		if !strings.Contains(got, want) {
			t.Fatalf("reflection lists %s, not %s", got, want)
		}
	}
	files, err := rs.FileContainingSymbol("ludus.v1.GameService")
	if err != nil || len(files) == 0 || !strings.Contains(fmt.Sprint(files[0].GetService()), "Play") {
		t.Fatalf("descriptor of GameService: %v", err)
	}
	_, _ = rs.Close()

	pre, _ := http.NewRequestWithContext(ctx, "OPTIONS", tg.url+ludusv1connect.GameServiceListGamesProcedure, nil)
	pre.Header.Set("Origin", "https://play.example.com")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-grpc-web,x-user-agent")
	r, err := hc.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.Header.Get("Access-Control-Allow-Origin") != "https://play.example.com" {
		t.Fatalf("preflight: %s %v", r.Status, r.Header)
	}
	// A real gRPC-Web call from that origin exposes the status headers.
	pl := loginAt(t, hc, tg.url, connect.WithGRPCWeb())
	var hdr http.Header
	games := ludusv1connect.NewGameServiceClient(hc, tg.url, connect.WithGRPCWeb(), connect.WithInterceptors(withTicket(&pl.ticket), originInterceptor{&hdr}))
	if _, err := games.ListGames(ctx, connect.NewRequest(&ludusv1.ListGamesRequest{})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hdr.Get("Access-Control-Expose-Headers"), "Grpc-Status") {
		t.Fatalf("gRPC-Web response exposes %q", hdr.Get("Access-Control-Expose-Headers"))
	}
}

// originInterceptor sends an Origin header and keeps the response headers.
type originInterceptor struct{ hdr *http.Header }

func (o originInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Origin", "https://play.example.com")
		resp, err := next(ctx, req)
		if resp != nil {
			*o.hdr = resp.Header()
		}
		return resp, err
	}
}

func (o originInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (o originInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
