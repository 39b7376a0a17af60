package gateway

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors, the pattern every role uses for its /metrics.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// MetricsHandler serves a registry in the Prometheus text (or OpenMetrics) format.
func MetricsHandler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r, EnableOpenMetrics: true})
}

// Stream kinds, the "kind" label of stream metrics.
const (
	kindPlayer    = "player"    // StreamFrames
	kindSpectator = "spectator" // Spectate
	kindPlay      = "play"      // Play (bidirectional)
)

// metrics are the gateway's Prometheus metrics. Streams are labelled by tenant
// and kind, never by stream, game or account id: those are unbounded.
type metrics struct {
	activeStreams  *prometheus.GaugeVec     // tenant, kind
	streamBytes    *prometheus.CounterVec   // tenant, kind
	streamFrames   *prometheus.CounterVec   // tenant, kind
	framesSkipped  *prometheus.CounterVec   // tenant, kind
	reattaches     *prometheus.CounterVec   // tenant
	reattachTime   *prometheus.HistogramVec // tenant
	limitRejected  *prometheus.CounterVec   // tenant, limit
	inputsAccepted *prometheus.CounterVec   // tenant
	// inputsByTenant caches inputsAccepted's counter of each tenant: every
	// input counts, and a label lookup hashes and locks.
	inputsByTenant sync.Map           // tenant → prometheus.Counter
	etcdReads      prometheus.Counter // reads of etcd (directory.go)
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		etcdReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ludus_gateway_etcd_reads_total",
			Help: "Reads of etcd by the gateway. Routing reads the watched directory, so this grows with listings and with lookups of games that are moving, over or unknown, not with inputs or streams.",
		}),
		activeStreams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ludus_gateway_active_streams",
			Help: "Frame streams open on this gateway (StreamFrames, Spectate, Play).",
		}, []string{"tenant", "kind"}),
		streamBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_stream_bytes_total",
			Help: "Frame bytes (encoded views) sent to clients; rate() is bytes/s.",
		}, []string{"tenant", "kind"}),
		streamFrames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_stream_frames_total",
			Help: "Frames sent to clients.",
		}, []string{"tenant", "kind"}),
		framesSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_stream_frames_skipped_total",
			Help: "Frames a stream skipped because its client (or the path to it) was slower than the game: tick gaps larger than the game's frame interval between consecutive frames.",
		}, []string{"tenant", "kind"}),
		reattaches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_reattaches_total",
			Help: "Open streams re-attached to a game's new owner node (handoff, failover).",
		}, []string{"tenant"}),
		reattachTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ludus_gateway_reattach_duration_seconds",
			Help:    "Time from losing a game's owner to streaming from its new owner.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"tenant"}),
		limitRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_limit_rejections_total",
			Help: "Calls refused by a gateway limit (streams, input_rate, pending_inputs, matchmaking_rate, game_rate, join_rate, or a quota).",
		}, []string{"tenant", "limit"}),
		inputsAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_gateway_inputs_total",
			Help: "Inputs forwarded to sim nodes (SendInput and Play).",
		}, []string{"tenant"}),
	}
	r.MustRegister(m.activeStreams, m.streamBytes, m.streamFrames, m.framesSkipped,
		m.reattaches, m.reattachTime, m.limitRejected, m.inputsAccepted, m.etcdReads)
	return m
}

// streamMeter counts one stream's frames into the tenant's counters. It is used
// by the stream's send goroutine only.
type streamMeter struct {
	bytes, frames, skipped prometheus.Counter
	lastTick               int64
	interval               int64 // smallest tick gap seen: the game's frame divisor
}

func (m *metrics) meter(tenant, kind string) *streamMeter {
	return &streamMeter{
		bytes:   m.streamBytes.WithLabelValues(tenant, kind),
		frames:  m.streamFrames.WithLabelValues(tenant, kind),
		skipped: m.framesSkipped.WithLabelValues(tenant, kind),
	}
}

// frame records a frame of tick sent with n payload bytes.
func (s *streamMeter) frame(tick int64, n int) {
	s.bytes.Add(float64(n))
	s.frames.Inc()
	s.skipped.Add(float64(s.gap(tick)))
}

// gap returns how many frames were skipped before tick. The frame interval is
// learned as the smallest positive gap seen, so the first gaps of a stream may
// go uncounted until an unskipped pair of frames arrives.
func (s *streamMeter) gap(tick int64) int64 {
	prev := s.lastTick
	s.lastTick = tick
	if prev == 0 || tick <= prev {
		return 0 // first frame, or the tick went back (a replayed game)
	}
	d := tick - prev
	if s.interval == 0 || d < s.interval {
		s.interval = d
	}
	return d/s.interval - 1
}

// streamOpened counts a stream as active until the returned func is called.
func (m *metrics) streamOpened(tenant, kind string) func() {
	g := m.activeStreams.WithLabelValues(tenant, kind)
	g.Inc()
	return g.Dec
}

// inputAccepted counts one input forwarded for tenant.
func (m *metrics) inputAccepted(tenant string) {
	c, ok := m.inputsByTenant.Load(tenant)
	if !ok {
		c, _ = m.inputsByTenant.LoadOrStore(tenant, m.inputsAccepted.WithLabelValues(tenant))
	}
	c.(prometheus.Counter).Inc()
}

func (m *metrics) reattached(tenant string, d time.Duration) {
	m.reattaches.WithLabelValues(tenant).Inc()
	m.reattachTime.WithLabelValues(tenant).Observe(d.Seconds())
}
