package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// H2CClient is an HTTP client speaking HTTP/2 without TLS (h2c), on its own
// connection pool: what Play needs (a bidirectional stream).
func H2CClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// Retryable reports whether a client re-sends an input (same seq) after this
// error: the game is moving or its owner is away (Unavailable, timeouts,
// transport failures), an event game waits for an earlier input (Aborted with
// InputGap), or the account's input rate is over its limit (ResourceExhausted,
// after a pause). Everything else (NotFound, FailedPrecondition, ...) is final.
func Retryable(code connect.Code) bool {
	switch code {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeAborted,
		connect.CodeResourceExhausted, connect.CodeUnknown, connect.CodeInternal:
		return true
	}
	return false
}

// errorTally counts errors by code and keeps the first message of each.
type errorTally struct {
	n     map[string]int
	first map[string]string
}

func (t *errorTally) note(err error) {
	if err == nil {
		return
	}
	if t.n == nil {
		t.n, t.first = map[string]int{}, map[string]string{}
	}
	code := connect.CodeOf(err).String()
	t.n[code]++
	if _, ok := t.first[code]; !ok {
		t.first[code] = err.Error()
	}
}

func (t *errorTally) merge(o *errorTally) {
	for c, n := range o.n {
		if t.n == nil {
			t.n, t.first = map[string]int{}, map[string]string{}
		}
		t.n[c] += n
		if _, ok := t.first[c]; !ok {
			t.first[c] = o.first[c]
		}
	}
}

func (t *errorTally) total() int {
	n := 0
	for _, c := range t.n {
		n += c
	}
	return n
}

// String is "code:count,..." sorted by code.
func (t *errorTally) String() string {
	var parts []string
	for c, n := range t.n {
		parts = append(parts, fmt.Sprintf("%s:%d", c, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// InputSample is one input of a driver: when it was first sent and when its
// acknowledgement arrived (zero: not yet).
type InputSample struct {
	Seq     uint64
	SentAt  time.Time
	AckedAt time.Time
}

// UnaryDriver sends one player's inputs with SendInput as a browser does:
// up to InFlight calls at once, at most Rate inputs per second; an input that
// fails with a retryable error is re-sent with the same seq until it is
// answered OK or the context ends.
type UnaryDriver struct {
	Client   ludusv1connect.GameServiceClient
	Game     string
	InFlight int     // default 3
	Rate     float64 // inputs/s, default 30
	Payload  func(seq uint64) []byte

	mu      sync.Mutex
	acks    map[uint64]AckRecord
	samples map[uint64]*InputSample
	retries errorTally
	final   errorTally
}

// Run sends inputs until ctx ends; it returns when every call has returned.
func (d *UnaryDriver) Run(ctx context.Context) {
	inFlight, rate := d.InFlight, d.Rate
	if inFlight <= 0 {
		inFlight = 3
	}
	if rate <= 0 {
		rate = 30
	}
	d.mu.Lock()
	d.acks, d.samples = map[uint64]AckRecord{}, map[uint64]*InputSample{}
	d.mu.Unlock()
	interval := time.Duration(float64(time.Second) / rate)
	slots := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	next := time.Now()
	for seq := uint64(1); ; seq++ {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if !sleepUntil(ctx, next) {
			return
		}
		next = next.Add(interval)
		if now := time.Now(); now.Sub(next) > 4*interval {
			next = now // no burst after a stall
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			d.send(ctx, seq)
		}()
	}
}

func (d *UnaryDriver) send(ctx context.Context, seq uint64) {
	payload := []byte{byte(seq % 16)}
	if d.Payload != nil {
		payload = d.Payload(seq)
	}
	sample := &InputSample{Seq: seq, SentAt: time.Now()}
	d.mu.Lock()
	d.samples[seq] = sample
	d.mu.Unlock()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := d.Client.SendInput(cctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: d.Game, Seq: seq, Payload: payload}))
		cancel()
		if err == nil {
			d.mu.Lock()
			sample.AckedAt = time.Now()
			d.acks[seq] = AckRecord{Seq: seq, AckedSeq: r.Msg.AckedSeq, SupersededBy: r.Msg.SupersededBySeq}
			d.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		if !Retryable(connect.CodeOf(err)) {
			d.final.note(err)
			d.mu.Unlock()
			return // the input is given up: never counted as acknowledged
		}
		d.retries.note(err)
		d.mu.Unlock()
		if !sleepUntil(ctx, time.Now().Add(backoff)) {
			return
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Acks returns the inputs answered OK, one record each.
func (d *UnaryDriver) Acks() []AckRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedAcks(d.acks)
}

// Samples returns every input sent, by seq.
func (d *UnaryDriver) Samples() []InputSample {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedSamples(d.samples)
}

// Errors returns the retried errors and the final ones ("code:count,...") and
// how many inputs were given up.
func (d *UnaryDriver) Errors() (retried, final string, givenUp int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.retries.String(), d.final.String(), d.final.total()
}

// PlayDriver plays one Play stream: a PlayStart, then inputs at Rate per
// second (SetRate), with at most Window unacknowledged (when the window is
// full a scheduled input is skipped, not queued). When the stream ends it is
// opened again and every unacknowledged input is re-sent, in order, with its
// seq. Acks are cumulative: an ack of seq N resolves every pending input up
// to N.
type PlayDriver struct {
	Client    ludusv1connect.GameServiceClient
	Game      string
	Delivery  ludusv1.Delivery
	Encodings []ludusv1.FrameEncoding
	Window    int // default 48 (the gateway allows 64 pending)
	Payload   func(seq uint64) []byte
	// OnFrame and OnStatus, if set, see every frame and status (from the
	// stream's receiving goroutine).
	OnFrame  func(*ludusv1.Frame)
	OnStatus func(*ludusv1.Status)

	mu          sync.Mutex
	rate        float64
	nextSeq     uint64
	pending     []*playPending
	samples     map[uint64]*InputSample
	acks        map[uint64]AckRecord
	skipped     int
	streams     int
	unknownAcks int
	streamErrs  errorTally
}

type playPending struct {
	seq     uint64
	payload []byte
	sample  *InputSample
}

// SetRate sets the inputs per second (0: none).
func (d *PlayDriver) SetRate(r float64) {
	d.mu.Lock()
	d.rate = r
	d.mu.Unlock()
}

func (d *PlayDriver) getRate() float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rate
}

// Run plays until ctx ends, re-opening the stream whenever it ends.
func (d *PlayDriver) Run(ctx context.Context) {
	d.mu.Lock()
	if d.samples == nil {
		d.samples, d.acks = map[uint64]*InputSample{}, map[uint64]AckRecord{}
	}
	d.mu.Unlock()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if d.session(ctx) {
			backoff = 50 * time.Millisecond
		} else {
			backoff = min(2*backoff, time.Second)
		}
		if !sleepUntil(ctx, time.Now().Add(backoff)) {
			return
		}
	}
}

// session runs one Play stream; it reports whether anything was received.
func (d *PlayDriver) session(ctx context.Context) bool {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := d.Client.Play(sctx)
	d.mu.Lock()
	d.streams++
	d.mu.Unlock()
	received := false
	recvErr := make(chan error, 1)
	finish := func(sendErr error) bool {
		if sendErr != nil {
			cancel()
		}
		_ = s.CloseRequest()
		cancel()
		err := <-recvErr
		_ = s.CloseResponse()
		if ctx.Err() == nil && err != nil {
			d.mu.Lock()
			d.streamErrs.note(err)
			d.mu.Unlock()
		}
		return received
	}
	go func() {
		for {
			m, err := s.Receive()
			if err != nil {
				recvErr <- err
				return
			}
			received = true
			d.handle(m)
		}
	}()
	if err := s.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{
		GameId: d.Game, AcceptEncodings: d.Encodings, Delivery: d.Delivery}}}); err != nil {
		return finish(err)
	}
	// Re-send what the last stream left unacknowledged, in order.
	d.mu.Lock()
	resend := append([]*playPending(nil), d.pending...)
	d.mu.Unlock()
	for _, in := range resend {
		if err := s.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: in.seq, Payload: in.payload}}}); err != nil {
			return finish(err)
		}
	}
	next := time.Now()
	for {
		rate := d.getRate()
		if rate <= 0 {
			next = time.Now().Add(20 * time.Millisecond)
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return finish(nil)
		case err := <-recvErr:
			t.Stop()
			recvErr <- err // finish reads it
			return finish(nil)
		case <-t.C:
		}
		if rate <= 0 {
			continue
		}
		interval := time.Duration(float64(time.Second) / rate)
		next = next.Add(interval)
		if now := time.Now(); now.Sub(next) > 4*interval {
			next = now // no burst after a stall
		}
		in := d.newInput()
		if in == nil {
			continue
		}
		if err := s.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: in.seq, Payload: in.payload}}}); err != nil {
			return finish(err)
		}
	}
}

// newInput takes the next seq, or returns nil when the window is full.
func (d *PlayDriver) newInput() *playPending {
	window := d.Window
	if window <= 0 {
		window = 48
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) >= window {
		d.skipped++
		return nil
	}
	d.nextSeq++
	seq := d.nextSeq
	payload := []byte{byte(seq % 16)}
	if d.Payload != nil {
		payload = d.Payload(seq)
	}
	in := &playPending{seq: seq, payload: payload, sample: &InputSample{Seq: seq, SentAt: time.Now()}}
	d.samples[seq] = in.sample
	d.pending = append(d.pending, in)
	return in
}

func (d *PlayDriver) handle(m *ludusv1.PlayResponse) {
	switch {
	case m.GetFrame() != nil:
		if d.OnFrame != nil {
			d.OnFrame(m.GetFrame())
		}
	case m.GetStatus() != nil:
		if d.OnStatus != nil {
			d.OnStatus(m.GetStatus())
		}
	case m.GetAck() != nil:
		d.ack(m.GetAck(), time.Now())
	}
}

// ack resolves every pending input up to the ack's seq: that input by its
// own ack, the earlier ones cumulatively.
func (d *PlayDriver) ack(a *ludusv1.InputAck, now time.Time) {
	durable := a.AckedSeq
	if a.SupersededBySeq != 0 {
		durable = a.SupersededBySeq
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.samples[a.AckedSeq]; !ok {
		d.unknownAcks++
	}
	keep := d.pending[:0]
	for _, in := range d.pending {
		if in.seq > a.AckedSeq {
			keep = append(keep, in)
			continue
		}
		if in.sample.AckedAt.IsZero() {
			in.sample.AckedAt = now
		}
		if _, done := d.acks[in.seq]; done {
			continue
		}
		if in.seq == a.AckedSeq {
			d.acks[in.seq] = AckRecord{Seq: in.seq, AckedSeq: a.AckedSeq, SupersededBy: a.SupersededBySeq}
		} else {
			d.acks[in.seq] = AckRecord{Seq: in.seq, CoveredBy: durable}
		}
	}
	clear(d.pending[len(keep):])
	d.pending = keep
}

// Acks returns the inputs acknowledged, one record each.
func (d *PlayDriver) Acks() []AckRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedAcks(d.acks)
}

// Samples returns every input sent, by seq.
func (d *PlayDriver) Samples() []InputSample {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sortedSamples(d.samples)
}

// PlayStats are a driver's counters.
type PlayStats struct {
	Streams     int    // streams opened
	Skipped     int    // scheduled inputs not sent: the window was full
	Pending     int    // inputs still unacknowledged
	UnknownAcks int    // acks of a seq this driver never sent
	StreamErrs  string // how streams ended, "code:count,..."
	FirstErrs   map[string]string
}

// Stats returns the driver's counters.
func (d *PlayDriver) Stats() PlayStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	first := map[string]string{}
	for k, v := range d.streamErrs.first {
		first[k] = v
	}
	return PlayStats{Streams: d.streams, Skipped: d.skipped, Pending: len(d.pending), UnknownAcks: d.unknownAcks,
		StreamErrs: d.streamErrs.String(), FirstErrs: first}
}

func sortedAcks(m map[uint64]AckRecord) []AckRecord {
	out := make([]AckRecord, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

func sortedSamples(m map[uint64]*InputSample) []InputSample {
	out := make([]InputSample, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// AckLatencies returns, sorted, the ack latency (ms) of the samples sent in
// [from, to): for an input still unacknowledged at `now`, the time it has
// waited so far (a lower bound), and how many those were.
func AckLatencies(samples []InputSample, from, to, now time.Time) (lat []float64, unacked int) {
	for _, s := range samples {
		if s.SentAt.Before(from) || !s.SentAt.Before(to) {
			continue
		}
		if s.AckedAt.IsZero() {
			unacked++
			lat = append(lat, ms(now.Sub(s.SentAt)))
			continue
		}
		lat = append(lat, ms(s.AckedAt.Sub(s.SentAt)))
	}
	sort.Float64s(lat)
	return lat, unacked
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
