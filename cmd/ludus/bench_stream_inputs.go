package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
	"ludus.dev/ludus/internal/bearer"
	"ludus.dev/ludus/internal/localcluster"
	"ludus.dev/ludus/ops/devstack"
)

// The stream bench's gateway takes more inputs per account than the default
// limits (60/s, 64 pending), so that the limits do not mask what one Play
// stream sustains: both are reported in the JSON
// (play_gateway_input_rate_limit, play_gateway_max_pending_inputs).
const (
	playGatewayInputRate  = 1000
	playGatewayMaxPending = 1024
)

// playSteps are the Play input rates tried, in order, until one is not
// sustained; the first also gives play_input_ack_ms_p99. When the last is
// sustained, play_inputs_per_sec is a lower bound (play_inputs_per_sec_capped).
var playSteps = []float64{30, 60, 90, 120, 180, 240, 360}

// playAckGoalMs is the ack latency p99 a rate must keep to count as sustained.
const playAckGoalMs = 500

// PlayStep is the outcome of one rate step.
type playStep struct {
	rate    float64
	held    time.Duration
	sent    int
	unacked int
	p50     float64
	p99     float64
}

// sustained: ack p99 within the goal, every input acknowledged, and the
// client really sent the rate (at least 90 % of rate × time).
func (s playStep) sustained() bool {
	return s.unacked == 0 && s.p99 <= playAckGoalMs && float64(s.sent) >= 0.9*s.rate*s.held.Seconds()
}

// bestSustained is the highest rate of the consecutive sustained steps from
// the first (0 when the first is not).
func bestSustained(steps []playStep) float64 {
	best := 0.0
	for _, s := range steps {
		if !s.sustained() {
			break
		}
		best = s.rate
	}
	return best
}

// benchPlay: one player on one Play stream (h2c, gRPC) of the bench's game
// sends inputs at each rate of playSteps for benchStreamPlayStep; the ack
// latency of an input is the time from sending its PlayInput to receiving its
// InputAck (an ack of a later seq resolves it too: acks are cumulative).
// play_inputs_per_sec is the highest rate whose ack p99 is ≤ 500 ms;
// play_input_ack_ms_p99 is the p99 at 30 inputs/s.
func benchPlay(ctx context.Context, progress io.Writer, res map[string]any, authc ludusv1connect.AuthServiceClient, gwURL, id string) error {
	delivery, err := parseDelivery(benchStreamMode)
	if err != nil {
		return err
	}
	device := make([]byte, 8)
	_, _ = rand.Read(device)
	login, err := authc.GuestLogin(ctx, connect.NewRequest(&ludusv1.GuestLoginRequest{Tenant: devstack.DemoTenant, DeviceId: fmt.Sprintf("bench-play-%x", device), DisplayName: "play"}))
	if err != nil {
		return err
	}
	games := ludusv1connect.NewGameServiceClient(localcluster.H2CClient(), gwURL, connect.WithGRPC(), noGzip,
		connect.WithInterceptors(bearer.Token(login.Msg.Ticket)))
	if _, err := games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		return err
	}
	var frames atomic.Int64
	var deliverySeen atomic.Value
	d := &localcluster.PlayDriver{Client: games, Game: id, Delivery: delivery, Window: playGatewayMaxPending - 24,
		Encodings: []ludusv1.FrameEncoding{ludusv1.FrameEncoding_FRAME_ENCODING_DELTA_ZSTD},
		OnFrame:   func(*ludusv1.Frame) { frames.Add(1) },
		OnStatus: func(st *ludusv1.Status) {
			if st.Delivery != "" {
				deliverySeen.Store(st.Delivery)
			}
		}}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(pctx) }()
	defer func() { stop(); <-done }()

	res["play_delivery"] = localcluster.DeliveryName(delivery)
	res["play_gateway_input_rate_limit"] = playGatewayInputRate
	res["play_gateway_max_pending_inputs"] = playGatewayMaxPending
	fmt.Fprintf(progress, "Play stream (%s): waiting for its first frame...\n", benchStreamMode)
	for wait := time.Now().Add(15 * time.Second); frames.Load() == 0 && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
	if frames.Load() == 0 {
		res["play_error"] = "no frame within 15 s"
	}
	var steps []playStep
	for i, rate := range playSteps {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		held := benchStreamPlayStep
		d.SetRate(rate)
		if i == 0 {
			time.Sleep(time.Second) // warm-up, not measured
			held += 2 * time.Second
		}
		fmt.Fprintf(progress, "Play inputs at %v/s for %v...\n", rate, held)
		from := time.Now()
		time.Sleep(held)
		to := time.Now()
		d.SetRate(0)
		// Let the acks of this step arrive (a late one counts at the time it
		// has waited when the wait ends).
		var lat []float64
		var unacked int
		for deadline := to.Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			lat, unacked = localcluster.AckLatencies(d.Samples(), from, to, time.Now())
			if unacked == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		s := playStep{rate: rate, held: to.Sub(from), sent: len(lat), unacked: unacked,
			p50: localcluster.Percentile(lat, 0.50), p99: localcluster.Percentile(lat, 0.99)}
		steps = append(steps, s)
		res[fmt.Sprintf("play_ack_ms_p99_at_%d", int(rate))] = math.Round(s.p99*10) / 10
		if i == 0 {
			res["play_input_ack_ms_p99"] = math.Round(s.p99*10) / 10
			res["play_input_ack_ms_p50"] = math.Round(s.p50*10) / 10
			res["play_inputs_sent_at_30"] = s.sent
			res["play_inputs_unacked_at_30"] = s.unacked
		}
		if !s.sustained() {
			res["play_first_unsustained_rate"] = rate
			res["play_first_unsustained_sent"] = s.sent
			res["play_first_unsustained_unacked"] = s.unacked
			break
		}
	}
	best := bestSustained(steps)
	res["play_inputs_per_sec"] = best
	res["play_inputs_per_sec_capped"] = best == playSteps[len(playSteps)-1]
	st := d.Stats()
	res["play_streams_opened"] = st.Streams
	if st.StreamErrs != "" {
		res["play_stream_errors"] = st.StreamErrs
		for _, e := range st.FirstErrs {
			res["play_error"] = e
			break
		}
	}
	if v, ok := deliverySeen.Load().(string); ok {
		res["play_delivery_seen"] = v
	}
	return nil
}
