package gateway

import (
	"context"
	"math"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Usage metering (issue 14): per tenant, the time players have a frame stream
// open on this gateway (StreamFrames and Play; spectators are not players)
// and the frame bytes sent to everyone, read from the gateway's own stream
// metrics (ludus_gateway_active_streams, ludus_gateway_stream_bytes_total),
// so the stream path does no extra work. Player time is sampled every
// second: a stream counts from the first sample that sees it open to the
// last, so each stream's time is right to within a second.

// UsageSink takes metered usage and reports it (backend.UsageReporter, with
// the cluster token).
type UsageSink interface {
	// Add merges one tenant's usage into the next report.
	Add(d *ludusv1.UsageDelta)
	// Flush reports what was added.
	Flush(ctx context.Context) (map[string]int64, error)
}

// Usage intervals: how often open streams are sampled, and how often usage is
// reported.
const (
	usageSampleEvery   = time.Second
	UsageFlushInterval = 10 * time.Second
)

// usageMeter turns the stream metrics into usage deltas. Used by one
// goroutine (RunUsage).
type usageMeter struct {
	m         *metrics
	playerMs  map[string]float64 // tenant -> player milliseconds not yet handed over
	bytesSent map[string]float64 // tenant -> stream bytes already handed over
}

func newUsageMeter(m *metrics) *usageMeter {
	return &usageMeter{m: m, playerMs: map[string]float64{}, bytesSent: map[string]float64{}}
}

// sample adds elapsed × the open player streams of each tenant.
func (u *usageMeter) sample(elapsed time.Duration) {
	eachSeries(u.m.activeStreams, func(l map[string]string, v float64) {
		if k := l["kind"]; (k == kindPlayer || k == kindPlay) && v > 0 {
			u.playerMs[l["tenant"]] += v * float64(elapsed) / float64(time.Millisecond)
		}
	})
}

// drain hands the usage since the last drain to sink: whole milliseconds of
// player time (the rest waits) and the stream bytes counted since.
func (u *usageMeter) drain(sink UsageSink) {
	deltas := map[string]*ludusv1.UsageDelta{}
	get := func(t string) *ludusv1.UsageDelta {
		d := deltas[t]
		if d == nil {
			d = &ludusv1.UsageDelta{TenantId: t}
			deltas[t] = d
		}
		return d
	}
	for t, ms := range u.playerMs {
		whole := math.Floor(ms)
		if whole >= 1 {
			get(t).PlayerMillis = int64(whole)
			u.playerMs[t] = ms - whole
		}
	}
	totals := map[string]float64{}
	eachSeries(u.m.streamBytes, func(l map[string]string, v float64) { totals[l["tenant"]] += v })
	for t, total := range totals {
		if n := int64(total - u.bytesSent[t]); n > 0 {
			get(t).StreamBytes = n
			u.bytesSent[t] += float64(n)
		}
	}
	for _, d := range deltas {
		sink.Add(d)
	}
}

// eachSeries calls f with the labels and value of every series of c (gauges
// and counters).
func eachSeries(c prometheus.Collector, f func(labels map[string]string, v float64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		l := make(map[string]string, len(d.Label))
		for _, p := range d.Label {
			l[p.GetName()] = p.GetValue()
		}
		switch {
		case d.Gauge != nil:
			f(l, d.Gauge.GetValue())
		case d.Counter != nil:
			f(l, d.Counter.GetValue())
		}
	}
}

// UsageReporterName is a name for this gateway as a usage reporter: "gateway-"
// and the host name.
func UsageReporterName() string {
	h, _ := os.Hostname()
	h = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, h)
	return ("gateway-" + h)[:min(64, len("gateway-"+h))]
}

// RunUsage meters the gateway's usage per tenant (player time, stream bytes)
// and reports it to sink every UsageFlushInterval until ctx ends, then once
// more.
func (g *Gateway) RunUsage(ctx context.Context, sink UsageSink) {
	u := newUsageMeter(g.metrics)
	tick := time.NewTicker(usageSampleEvery)
	defer tick.Stop()
	last, flushed := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			u.sample(time.Since(last))
			u.drain(sink)
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if _, err := sink.Flush(fctx); err != nil {
				g.log.Warn("last usage report failed", "err", err)
			}
			cancel()
			return
		case now := <-tick.C:
			u.sample(now.Sub(last))
			last = now
			if now.Sub(flushed) < UsageFlushInterval {
				continue
			}
			flushed = now
			u.drain(sink)
			fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := sink.Flush(fctx); err != nil && ctx.Err() == nil {
				g.log.Warn("usage report failed; it is sent again next time", "err", err)
			}
			cancel()
		}
	}
}
