package localcluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"ludus.dev/ludus/internal/bearer"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/simnode"
	"ludus.dev/ludus/simnode/engine"
	"ludus.dev/ludus/simnode/inputlog"
)

// FailoverResult is what a kill -9 of one sim node did to the games it ran.
// Field names are read by tools (`ludus bench failover -json`): keep them.
type FailoverResult struct {
	Games       int   `json:"games"`
	VictimGames int   `json:"victim_games"`
	LeaseTTLms  int64 `json:"lease_ttl_ms"`
	// Delivery is what every stream of the run asked for ("snapshots",
	// "pixels", or "default": unset, the server's choice); DeliverySeen the
	// deliveries the player streams' statuses reported (comma-separated).
	Delivery      string  `json:"delivery"`
	DeliverySeen  string  `json:"delivery_seen"`
	TakeoverMsP50 float64 `json:"takeover_ms_p50"`
	TakeoverMsP99 float64 `json:"takeover_ms_p99"`
	// AckedInputs: inputs answered OK (SendInput) or acknowledged (Play), each
	// counted once by its own seq; UnaryInputsAcked + PlayInputsAcked.
	AckedInputs      int `json:"acked_inputs"`
	UnaryInputsAcked int `json:"unary_inputs_acked"`
	PlayInputsAcked  int `json:"play_inputs_acked"`
	// AckedInputsLost: seqs a reply claimed durable (its acked_seq, or its
	// superseded_by_seq) that are not in the game's log for that account.
	AckedInputsLost int `json:"acked_inputs_lost"`
	// OkInputsNotInLog: inputs answered OK whose own seq is neither in the
	// log for that account nor reported superseded by a later seq that is in
	// the log (a Play input resolved by a later input's cumulative ack: no
	// seq up to that ack's is in the log). Must be 0.
	OkInputsNotInLog int `json:"ok_inputs_not_in_log"`
	// InputsSuperseded: OK replies saying superseded_by_seq (state inputs).
	InputsSuperseded int `json:"inputs_superseded"`
	// PlayInputsAckedCumulatively: Play inputs that got no ack of their own,
	// only a later input's.
	PlayInputsAckedCumulatively int `json:"play_inputs_acked_cumulatively"`
	// AckSeqMismatches: replies whose acked_seq is not the input's own seq.
	AckSeqMismatches int `json:"ack_seq_mismatches"`
	// InputsDoubled: (account, seq) pairs the log applied more than once.
	InputsDoubled int `json:"inputs_applied_twice"`
	// LogInputsWithoutJoin: log inputs of a slot whose join the log lacks
	// (their account is unknown, so they match no player).
	LogInputsWithoutJoin int `json:"log_inputs_without_join"`
	// InputRetries: unary re-sends (same seq) after a retryable error, by
	// code in InputRetryCodes; InputsGivenUp: inputs refused with a final
	// error (InputFinalErrors), never counted as acknowledged.
	InputRetries     int    `json:"input_retries"`
	InputRetryCodes  string `json:"input_retry_codes"`
	InputsGivenUp    int    `json:"inputs_given_up"`
	InputFinalErrors string `json:"input_final_errors"`
	// PlayStreamsOpened: Play streams opened (each player re-opens its
	// stream when it ends, re-sending unacknowledged inputs); how they
	// ended in PlayStreamErrors; PlayInputsSkipped: scheduled Play inputs not
	// sent because 48 were unacknowledged.
	PlayStreamsOpened int    `json:"play_streams_opened"`
	PlayStreamErrors  string `json:"play_stream_errors"`
	PlayInputsSkipped int    `json:"play_inputs_skipped"`
	// UnaryAckMsP99, PlayAckMsP99: input acknowledgement latency over the
	// whole run (handoffs and the kill included).
	UnaryAckMsP99 float64 `json:"unary_ack_ms_p99"`
	PlayAckMsP99  float64 `json:"play_ack_ms_p99"`
	// RollbackTicksMax: the most ticks any player stream went back (a frame
	// below the highest tick that stream had shown), and in ms at the game's
	// tick rate; Rollbacks: how many times streams jumped back.
	RollbackTicksMax int64   `json:"rollback_ticks_max"`
	RollbackMsMax    float64 `json:"rollback_ms_max"`
	Rollbacks        int     `json:"rollbacks"`
	GamesLost        int     `json:"games_lost"`
	HashesChecked    int     `json:"state_hashes_checked"`
	ReplayMismatch   int     `json:"replay_mismatches"`
	// HandoffPauseMsP99: the longest gap between two frames a player saw around
	// a handoff of its game (p99 over the handed-off games).
	HandoffPauseMsP99 float64 `json:"handoff_pause_ms_p99"`
	Handoffs          int     `json:"handoffs"`
	// ReplayMsPerMinOfPlay: time to rebuild a game from its full log, per minute
	// of play it holds (no checkpoint used).
	ReplayMsPerMinOfPlay float64 `json:"replay_ms_per_min_of_play"`
	// EtcdWritesPerGameSec: etcd revisions (one per transaction) per running
	// game per second of steady play, with players sending inputs.
	EtcdWritesPerGameSec float64 `json:"etcd_writes_per_game_sec"`
	// SpectatorDelayMsP99: how far behind the player's own view the spectator
	// stream (served by a replica node) runs.
	SpectatorDelayMsP99 float64 `json:"spectator_delay_ms_p99"`
	// Takeover, step by step, over the killed node's games, from the kill:
	// TakeoverOrphanedMs* until the game's owner key left etcd (the killed
	// node's lease expired), TakeoverClaimedMs* until another node's claim
	// was written (both as seen by a watch in this process); TakeoverMs* ends
	// at the player's first frame from the new owner.
	TakeoverOrphanedMsP99 float64 `json:"takeover_orphaned_ms_p99"`
	TakeoverClaimedMsP50  float64 `json:"takeover_claimed_ms_p50"`
	TakeoverClaimedMsP99  float64 `json:"takeover_claimed_ms_p99"`
	// CPUCoresSteady: CPU-seconds per second each process used during the
	// steady-play window ("bench" is this process: every scripted client and
	// spectator), and CPUCoresSteadyTotal their sum: a measure of how loaded
	// the machine was (Linux /proc; empty elsewhere).
	CPUCoresSteady      string  `json:"cpu_cores_steady"`
	CPUCoresSteadyTotal float64 `json:"cpu_cores_steady_total"`
}

// FailoverOptions configure RunFailoverWith.
type FailoverOptions struct {
	Games  int
	Warmup time.Duration
	// Delivery of every stream the run opens; unset: the server's default.
	Delivery ludusv1.Delivery
	// UnaryRate and PlayRate: inputs per second of each kind of player
	// (default 30 each).
	UnaryRate, PlayRate float64
}

// DeliveryName is the short name of a delivery ("snapshots", "pixels",
// "default").
func DeliveryName(d ludusv1.Delivery) string {
	switch d {
	case ludusv1.Delivery_DELIVERY_SNAPSHOTS:
		return "snapshots"
	case ludusv1.Delivery_DELIVERY_PIXELS:
		return "pixels"
	}
	return "default"
}

// player is the browser-like scripted client of one game: it streams frames
// (re-opening the stream whenever it ends, as a client does) and sends inputs
// with SendInput, three in flight, re-sending an input (same seq) after a
// retryable error.
type player struct {
	game     string
	account  string
	tickRate int32
	delivery ludusv1.Delivery
	client   ludusv1connect.GameServiceClient
	inputs   *UnaryDriver
	mu       sync.Mutex
	frames   []frameSeen
	nodeNow  string
	lastTick int64
	ticks    TickTracker
	seen     map[string]bool // Status.delivery values
	// streamErrs: how the player's frame streams ended (errors only).
	streamErrs errorTally
	// native is the game's second scripted player, on a Play stream.
	native *nativePlayer
}

// nativePlayer is a native client of the game: one Play stream (re-opened
// when it ends), inputs at a steady rate, acks on the stream.
type nativePlayer struct {
	account string
	drv     *PlayDriver
	mu      sync.Mutex
	ticks   TickTracker
	seen    map[string]bool
}

type frameSeen struct {
	at   time.Time
	node string
}

// RunFailover is RunFailoverWith with the streams' default delivery.
func RunFailover(ctx context.Context, c *Cluster, eng *engine.Engine, module []byte, games int, warmup time.Duration) (FailoverResult, error) {
	return RunFailoverWith(ctx, c, eng, module, FailoverOptions{Games: games, Warmup: warmup})
}

// login signs a guest in and returns its account and a game client. The
// account is created first through the tenant's admin API: guest sign-ups
// are throttled per client address (backend.DefaultSignupsPerAddress: a burst
// of 100, then 20 a minute), and every client of the run comes from
// 127.0.0.1, while signing in to an existing account is never throttled.
func login(ctx context.Context, c *Cluster, hc *http.Client, opts ...connect.ClientOption) (string, ludusv1connect.GameServiceClient, error) {
	dev := make([]byte, 12)
	_, _ = rand.Read(dev)
	device := fmt.Sprintf("failover-%x", dev)
	if err := c.createDevice(ctx, device); err != nil {
		return "", nil, fmt.Errorf("create account: %w", err)
	}
	auth := ludusv1connect.NewAuthServiceClient(http.DefaultClient, c.GatewayURL)
	l, err := auth.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: "demo", DeviceId: device}))
	if err != nil {
		return "", nil, fmt.Errorf("login: %w", err)
	}
	opts = append(opts, connect.WithInterceptors(bearer.Token(l.Msg.Ticket)))
	return l.Msg.AccountId, ludusv1connect.NewGameServiceClient(hc, c.GatewayURL, opts...), nil
}

// createDevice creates a guest account for a device id with the demo
// tenant's admin key. Account creation is also throttled per tenant (600 a
// minute): on ResourceExhausted it waits and retries, for at most 30 s.
func (c *Cluster) createDevice(ctx context.Context, device string) error {
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.AdminKey)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := admin.CreateAccount(ctx, connect.NewRequest(&ludusv1.CreateAccountRequest{DeviceId: device}))
		if err == nil || connect.CodeOf(err) != connect.CodeResourceExhausted || time.Now().After(deadline) {
			return err
		}
		if !sleepUntil(ctx, time.Now().Add(time.Second)) {
			return ctx.Err()
		}
	}
}

// RunFailoverWith creates games (each with bots and two scripted players: one
// browser-like, streaming frames and sending unary inputs, one native, on a
// Play stream), lets them play for warmup, hands some games off, kills -9 the
// sim node running the most games, and measures, per game of that node, the
// time from the kill to the first frame its player receives from the new
// owner. Then it checks every acknowledged input against the game's log
// (exactly once, or superseded by a later input that is there), and that a
// full replay of each log reproduces every recorded state hash.
func RunFailoverWith(ctx context.Context, c *Cluster, eng *engine.Engine, module []byte, o FailoverOptions) (FailoverResult, error) {
	games, warmup := o.Games, o.Warmup
	res := FailoverResult{Games: games, LeaseTTLms: c.cfg.LeaseTTL.Milliseconds(), Delivery: DeliveryName(o.Delivery)}
	players := make([]*player, games)
	byNode := map[string][]*player{}
	var clients []*http.Client
	defer func() {
		for _, hc := range clients {
			hc.CloseIdleConnections()
		}
	}()
	for i := range players {
		// A browser-like player: HTTP/1.1, its own connections (a few, kept
		// alive: three inputs in flight and a frame stream).
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 6}}
		clients = append(clients, hc)
		account, client, err := login(ctx, c, hc)
		if err != nil {
			return res, err
		}
		p := &player{account: account, client: client, delivery: o.Delivery, seen: map[string]bool{}}
		// Limits far away: the games must outlive the test.
		g, err := p.client.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 3,
			Config: []byte(`{"score_limit":10000,"time_limit_s":3600}`)}))
		if err != nil {
			return res, fmt.Errorf("create game %d: %w", i, err)
		}
		p.game, p.tickRate = g.Msg.Game.GameId, g.Msg.Game.TickRate
		if p.tickRate <= 0 {
			p.tickRate = 35
		}
		if _, err := p.client.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: p.game})); err != nil {
			return res, fmt.Errorf("join: %w", err)
		}
		p.inputs = &UnaryDriver{Client: p.client, Game: p.game, InFlight: 3, Rate: o.UnaryRate}
		// The native player: its own account and HTTP/2 connection.
		h2c := H2CClient()
		clients = append(clients, h2c)
		nAccount, nClient, err := login(ctx, c, h2c, connect.WithGRPC())
		if err != nil {
			return res, err
		}
		if _, err := nClient.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: p.game})); err != nil {
			return res, fmt.Errorf("join (native player): %w", err)
		}
		n := &nativePlayer{account: nAccount, seen: map[string]bool{}}
		n.drv = &PlayDriver{Client: nClient, Game: p.game, Delivery: o.Delivery, Window: 48,
			OnFrame: func(f *ludusv1.Frame) {
				n.mu.Lock()
				n.ticks.Observe(f.Tick)
				n.mu.Unlock()
			},
			OnStatus: func(st *ludusv1.Status) {
				n.mu.Lock()
				if st.Delivery != "" {
					n.seen[st.Delivery] = true
				}
				n.mu.Unlock()
			}}
		playRate := o.PlayRate
		if playRate <= 0 {
			playRate = 30
		}
		n.drv.SetRate(playRate)
		p.native = n
		players[i] = p
		byNode[g.Msg.Game.NodeId] = append(byNode[g.Msg.Game.NodeId], p)
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range players {
		wg.Add(3)
		go func() { defer wg.Done(); p.stream(pctx) }()
		go func() { defer wg.Done(); p.inputs.Run(pctx) }()
		go func() { defer wg.Done(); p.native.drv.Run(pctx) }()
	}
	// Spectators of the first few games, through the gateway (a replica node),
	// during steady play (until the handoffs start).
	var specDelays []float64
	var specMu sync.Mutex
	sctx, stopSpectators := context.WithCancel(pctx)
	defer stopSpectators()
	for i, p := range players {
		if i >= 5 {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := p.spectate(sctx)
			specMu.Lock()
			specDelays = append(specDelays, d...)
			specMu.Unlock()
		}()
	}
	abort := func(err error) (FailoverResult, error) {
		stop()
		wg.Wait()
		return res, err
	}
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		return abort(ctx.Err())
	}
	// Steady play: etcd writes per game-second.
	r0, err := c.Etcd.Revision(ctx)
	if err != nil {
		return abort(err)
	}
	window := 2 * time.Second
	cpu0, t0 := c.cpuTimes(), time.Now()
	time.Sleep(window)
	r1, err := c.Etcd.Revision(ctx)
	if err != nil {
		return abort(err)
	}
	res.CPUCoresSteady, res.CPUCoresSteadyTotal = cpuCores(cpu0, c.cpuTimes(), time.Since(t0))
	res.EtcdWritesPerGameSec = float64(r1-r0) / float64(games) / window.Seconds()
	stopSpectators()

	// Handoffs: move up to 10 games and measure the pause their players see.
	fleetc := ludusv1connect.NewFleetServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.OperatorKey)))
	var pauses []float64
	for i, p := range players {
		if i >= 10 || ctx.Err() != nil {
			break
		}
		at := time.Now()
		if _, err := fleetc.HandoffGame(ctx, connect.NewRequest(&ludusv1.HandoffGameRequest{TenantId: c.TenantID, GameId: p.game})); err != nil {
			continue
		}
		res.Handoffs++
		time.Sleep(1500 * time.Millisecond)
		pauses = append(pauses, p.longestGap(at.Add(-200*time.Millisecond), time.Now()))
	}
	sort.Float64s(pauses)
	res.HandoffPauseMsP99 = percentile(pauses, 0.99)
	// Games moved: find where each runs now.
	byNode = map[string][]*player{}
	for _, p := range players {
		g, err := c.Etcd.View().Game(ctx, c.TenantID, p.game)
		if err == nil {
			byNode[g.Owner] = append(byNode[g.Owner], p)
		}
	}
	victim := ""
	for n, ps := range byNode {
		if len(ps) > len(byNode[victim]) || victim == "" {
			victim = n
		}
	}
	res.VictimGames = len(byNode[victim])
	for _, p := range players {
		p.mu.Lock()
		n := len(p.frames)
		p.mu.Unlock()
		if n == 0 {
			p.mu.Lock()
			errs := p.streamErrs.String()
			for _, e := range p.streamErrs.first {
				errs += "; " + e
			}
			p.mu.Unlock()
			return abort(fmt.Errorf("player of game %s received no frame during the warm-up (delivery %s; stream errors: %s)", p.game, res.Delivery, errs))
		}
	}
	victimGames := map[string]bool{}
	for _, p := range byNode[victim] {
		victimGames[p.game] = true
	}
	ow, err := c.watchOwners(ctx, victim, victimGames)
	if err != nil {
		return abort(err)
	}
	killed := time.Now()
	if err := c.Proc(victim).Kill(); err != nil {
		ow.stop()
		return abort(fmt.Errorf("kill %s: %w", victim, err))
	}
	// Wait until every victim game streams from another node (bounded).
	deadline := killed.Add(10*c.cfg.LeaseTTL + 20*time.Second)
	var takeovers []float64
	pending := append([]*player(nil), byNode[victim]...)
	for len(pending) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		var still []*player
		for _, p := range pending {
			if t, ok := p.firstFrameAfter(killed, victim); ok {
				takeovers = append(takeovers, ms(t.Sub(killed)))
			} else {
				still = append(still, p)
			}
		}
		pending = still
		time.Sleep(20 * time.Millisecond)
	}
	res.GamesLost = len(pending)
	orphaned, claimed := ow.stop()
	res.TakeoverOrphanedMsP99 = percentile(sinceSorted(orphaned, killed), 0.99)
	cl := sinceSorted(claimed, killed)
	res.TakeoverClaimedMsP50, res.TakeoverClaimedMsP99 = percentile(cl, 0.50), percentile(cl, 0.99)
	// Keep playing a little on the new owners, then stop and let logs flush.
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	time.Sleep(500 * time.Millisecond)
	sort.Float64s(takeovers)
	res.TakeoverMsP50, res.TakeoverMsP99 = percentile(takeovers, 0.50), percentile(takeovers, 0.99)

	specMu.Lock()
	sort.Float64s(specDelays)
	res.SpectatorDelayMsP99 = percentile(specDelays, 0.99)
	specMu.Unlock()

	// What the clients saw: rollbacks, deliveries, retries, ack latencies.
	deliveries := map[string]bool{}
	var retries, finals, streamErrs errorTally
	var unaryLat, playLat []float64
	for _, p := range players {
		n := p.native
		p.mu.Lock()
		n.mu.Lock()
		for _, t := range []*TickTracker{&p.ticks, &n.ticks} {
			res.Rollbacks += t.Rollbacks()
			if rb := t.MaxRollback(); rb > res.RollbackTicksMax {
				res.RollbackTicksMax = rb
			}
			res.RollbackMsMax = max(res.RollbackMsMax, TicksToMs(t.MaxRollback(), p.tickRate))
		}
		for d := range p.seen {
			deliveries[d] = true
		}
		for d := range n.seen {
			deliveries[d] = true
		}
		n.mu.Unlock()
		p.mu.Unlock()
		p.inputs.mu.Lock()
		retries.merge(&p.inputs.retries)
		finals.merge(&p.inputs.final)
		p.inputs.mu.Unlock()
		st := n.drv.Stats()
		res.PlayStreamsOpened += st.Streams
		res.PlayInputsSkipped += st.Skipped
		n.drv.mu.Lock()
		streamErrs.merge(&n.drv.streamErrs)
		n.drv.mu.Unlock()
		unaryLat = append(unaryLat, ackedOnly(p.inputs.Samples())...)
		playLat = append(playLat, ackedOnly(n.drv.Samples())...)
	}
	res.DeliverySeen = joinKeys(deliveries)
	res.InputRetries, res.InputRetryCodes = retries.total(), retries.String()
	res.InputsGivenUp, res.InputFinalErrors = finals.total(), finals.String()
	res.PlayStreamErrors = streamErrs.String()
	sort.Float64s(unaryLat)
	sort.Float64s(playLat)
	res.UnaryAckMsP99, res.PlayAckMsP99 = percentile(unaryLat, 0.99), percentile(playLat, 0.99)

	// Every acknowledged input against the log; then a full replay.
	var replayMs, playMin float64
	for _, p := range players {
		spec, chunks, err := c.ReadLog(ctx, p.game)
		if err != nil {
			return res, fmt.Errorf("read log of %s: %w", p.game, err)
		}
		idx := IndexLog(chunks)
		unary := CheckAcks(idx, p.account, p.inputs.Acks())
		native := CheckAcks(idx, p.native.account, p.native.drv.Acks())
		all := unary.Add(native)
		res.AckedInputs += all.Acked
		res.UnaryInputsAcked += unary.Acked
		res.PlayInputsAcked += native.Acked
		res.AckedInputsLost += all.Lost
		res.OkInputsNotInLog += all.NotInLog
		res.InputsSuperseded += all.Superseded
		res.PlayInputsAckedCumulatively += native.Cumulative
		res.AckSeqMismatches += all.SeqMismatch
		res.InputsDoubled += idx.AppliedTwice()
		res.LogInputsWithoutJoin += idx.Unjoined
		began := time.Now()
		inst, hashes, err := simnode.Replay(ctx, eng, module, spec, chunks)
		replayMs += ms(time.Since(began))
		if len(chunks) > 0 && spec.TickRate > 0 {
			playMin += float64(chunks[len(chunks)-1].To) / float64(spec.TickRate) / 60
		}
		res.HashesChecked += len(hashes)
		var desync *simnode.DesyncError
		if errors.As(err, &desync) {
			res.ReplayMismatch++
		} else if err != nil {
			return res, fmt.Errorf("replay %s: %w", p.game, err)
		}
		if inst != nil {
			inst.Close(ctx)
		}
	}
	if playMin > 0 {
		res.ReplayMsPerMinOfPlay = replayMs / playMin
	}
	return res, nil
}

// ackedOnly is the ack latency (ms) of every acknowledged sample.
func ackedOnly(samples []InputSample) []float64 {
	var out []float64
	for _, s := range samples {
		if !s.AckedAt.IsZero() {
			out = append(out, ms(s.AckedAt.Sub(s.SentAt)))
		}
	}
	return out
}

func joinKeys(m map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// longestGap is the longest interval between consecutive frames the player
// received in [from, to], in milliseconds.
func (p *player) longestGap(from, to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Time
	worst := 0.0
	for _, f := range p.frames {
		if f.at.Before(from) {
			last = f.at
			continue
		}
		if f.at.After(to) {
			break
		}
		if !last.IsZero() {
			worst = max(worst, float64(f.at.Sub(last).Microseconds())/1000)
		}
		last = f.at
	}
	return worst
}

// spectate watches the game's spectator stream and returns, for each frame,
// how far (ms) it runs behind the player's own view.
func (p *player) spectate(ctx context.Context) []float64 {
	var delays []float64
	s, err := p.client.Spectate(ctx, connect.NewRequest(&ludusv1.SpectateRequest{GameId: p.game, Delivery: p.delivery}))
	if err != nil {
		return nil
	}
	defer s.Close()
	for s.Receive() {
		f := s.Msg().GetFrame()
		if f == nil {
			continue
		}
		p.mu.Lock()
		own := p.lastTick
		p.mu.Unlock()
		if own > 0 && f.Tick > 0 {
			delays = append(delays, TicksToMs(own-f.Tick, p.tickRate))
		}
	}
	return delays
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func (p *player) firstFrameAfter(t time.Time, notNode string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frames {
		if f.at.After(t) && f.node != notNode && f.node != "" {
			return f.at, true
		}
	}
	return time.Time{}, false
}

func (p *player) stream(ctx context.Context) {
	for ctx.Err() == nil {
		s, err := p.client.StreamFrames(ctx, connect.NewRequest(&ludusv1.StreamFramesRequest{GameId: p.game, Delivery: p.delivery}))
		if err == nil {
			for s.Receive() {
				m := s.Msg()
				p.mu.Lock()
				if st := m.GetStatus(); st != nil {
					p.nodeNow = st.NodeId
					if st.Delivery != "" {
						p.seen[st.Delivery] = true
					}
				} else if f := m.GetFrame(); f != nil {
					p.frames = append(p.frames, frameSeen{at: time.Now(), node: p.nodeNow})
					p.lastTick = f.Tick
					p.ticks.Observe(f.Tick)
				}
				p.mu.Unlock()
			}
			err = s.Err()
			s.Close()
		}
		if err != nil && ctx.Err() == nil {
			p.mu.Lock()
			p.streamErrs.note(err)
			p.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadLog reads a game's spec and log from etcd, or from the backend's archive
// once the game has finished and left etcd.
func (c *Cluster) ReadLog(ctx context.Context, game string) (clusterstate.GameSpec, []*inputlog.Chunk, error) {
	spec, chunks, err := simnode.ReadLog(ctx, c.Etcd, c.TenantID, game)
	if !errors.Is(err, clusterstate.ErrGameNotFound) {
		return spec, chunks, err
	}
	admin := ludusv1connect.NewAdminServiceClient(http.DefaultClient, c.BackendURL, connect.WithInterceptors(bearer.Token(c.AdminKey)))
	lg, aerr := admin.GetGameLog(ctx, connect.NewRequest(&ludusv1.GetGameLogRequest{GameId: game}))
	if aerr != nil {
		return spec, nil, fmt.Errorf("%w (archive: %v)", err, aerr)
	}
	if err := json.Unmarshal(lg.Msg.SpecJson, &spec); err != nil {
		return spec, nil, err
	}
	chunks = nil
	for _, b := range lg.Msg.Chunks {
		ch, err := inputlog.Decode(b)
		if err != nil {
			return spec, nil, err
		}
		chunks = append(chunks, ch)
	}
	return spec, chunks, nil
}

// ownerWatch records, for the games of a node about to be killed, when each
// game's owner key was deleted (the node's lease expired) and when another
// node first claimed it.
type ownerWatch struct {
	cancel   context.CancelFunc
	done     chan struct{}
	orphaned map[string]time.Time
	claimed  map[string]time.Time
}

// watchOwners starts watching the owner keys of the tenant's games from the
// current revision on; games are the ones to track, victim the node whose
// claims do not count.
func (c *Cluster) watchOwners(ctx context.Context, victim string, games map[string]bool) (*ownerWatch, error) {
	rev, err := c.Etcd.Revision(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &ownerWatch{cancel: cancel, done: make(chan struct{}), orphaned: map[string]time.Time{}, claimed: map[string]time.Time{}}
	ch := c.Etcd.WatchOwners(wctx, clusterstate.OwnerWatch{Tenant: c.TenantID, From: rev + 1})
	go func() {
		defer close(w.done)
		for evs := range ch {
			now := time.Now()
			for _, ev := range evs {
				game := ev.Game
				if !games[game] {
					continue
				}
				if ev.Deleted {
					if _, ok := w.orphaned[game]; !ok {
						w.orphaned[game] = now
					}
				} else if _, ok := w.claimed[game]; !ok && ev.Node() != victim {
					w.claimed[game] = now
				}
			}
		}
	}()
	return w, nil
}

// stop ends the watch and returns what it saw.
func (w *ownerWatch) stop() (orphaned, claimed map[string]time.Time) {
	w.cancel()
	<-w.done
	return w.orphaned, w.claimed
}

// sinceSorted is the ms from t to each time, sorted.
func sinceSorted(at map[string]time.Time, t time.Time) []float64 {
	out := make([]float64, 0, len(at))
	for _, a := range at {
		out = append(out, ms(a.Sub(t)))
	}
	sort.Float64s(out)
	return out
}

// cpuTimes is the CPU time used so far by each running process of the
// cluster and by this one ("bench").
func (c *Cluster) cpuTimes() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, n := range c.Procs() {
		if d, ok := c.Proc(n).CPUTime(); ok {
			m[n] = d
		}
	}
	if d, ok := procCPUTime("/proc/self/stat"); ok {
		m["bench"] = d
	}
	return m
}

// cpuCores turns two cpuTimes readings el apart into "name:cores,..." (sorted
// by name, two decimals) and their sum.
func cpuCores(a, b map[string]time.Duration, el time.Duration) (string, float64) {
	if el <= 0 {
		return "", 0
	}
	var names []string
	for n := range b {
		if _, ok := a[n]; ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var parts []string
	total := 0.0
	for _, n := range names {
		cores := (b[n] - a[n]).Seconds() / el.Seconds()
		total += cores
		parts = append(parts, fmt.Sprintf("%s:%.2f", n, cores))
	}
	return strings.Join(parts, ","), math.Round(total*100) / 100
}
