package simnode

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ludus.dev/ludus/simnode/engine"
)

// Metrics. Every collector on the tick path is resolved to its child (label
// values bound) when a game starts, so a tick only touches atomics: observing a
// histogram and adding to a counter take no lock.

// latenessBuckets resolve the range that matters for a 5 ms lateness target
// finely, so a p99 read from the buckets is exact at the 5 ms boundary.
var latenessBuckets = []float64{
	.0001, .00025, .0005, .001, .002, .003, .004, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1,
}

// desyncs is process-wide: replays run outside nodes too (ludus replay, the
// local cluster's checks). Every node registers it on its registry.
var desyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ludus_desyncs_total",
	Help: "Replays whose state hash differed from the one the owner recorded, by build.",
}, []string{"build"})

// nodeMetrics are one node's collectors.
type nodeMetrics struct {
	reg      *prometheus.Registry
	lateness prometheus.Histogram
	dropped  *prometheus.CounterVec // frames not rendered because the tick was late, by tenant
	tickCPU  *prometheus.CounterVec // wall time spent in ticks (step, hash, views), by tenant
	failed   *prometheus.CounterVec // matches failed by their module, by cause
	warm     *prometheus.CounterVec // instances acquired, by warm="true|false"
	stalled  prometheus.Counter     // ticks held back because the log was behind
}

func newNodeMetrics(n *Node, reg *prometheus.Registry) *nodeMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &nodeMetrics{
		reg: reg,
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ludus_tick_lateness_seconds",
			Help:    "How long after its scheduled time each tick started (including the wait for a worker).",
			Buckets: latenessBuckets,
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_frames_dropped_total",
			Help: "View frames not rendered because their tick started later than Config.FrameDropLateness.",
		}, []string{"tenant"}),
		tickCPU: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_tick_seconds_total",
			Help: "Time games spent ticking (step, state hash, views) on a worker, by tenant.",
		}, []string{"tenant"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_games_failed_total",
			Help: "Matches ended by their module: cause is deadline (CPU deadline), trap (crash, memory cap) or other.",
		}, []string{"cause"}),
		warm: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ludus_instances_acquired_total",
			Help: "Instances acquired for new matches; warm=true came pre-instantiated from the pool.",
		}, []string{"warm"}),
		stalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ludus_ticks_stalled_total",
			Help: "Ticks held back because the game was Config.MaxSpeculation ahead of its durable log (etcd slow or unreachable).",
		}),
	}
	// Two nodes may share a registry (one process): their collectors differ by
	// the node label.
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"node": n.cfg.ID}, reg)
	wrapped.MustRegister(m.lateness, m.dropped, m.tickCPU, m.failed, m.warm, m.stalled,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ludus_games", Help: "Games running on the node."},
			func() float64 { return float64(n.count.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ludus_scheduler_workers", Help: "Games that may tick at once."},
			func() float64 { return float64(n.sched.workers) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ludus_warm_instances_target",
			Help: "Warm instances the node keeps, summed over builds (each build's pool is sized by its recent starts)."},
			func() float64 { return float64(n.warm.total()) }),
	)
	if err := reg.Register(desyncs); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
	return m
}

func (m *nodeMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// failCause classifies a module failure for metrics and messages.
func failCause(err error) string {
	var te *engine.TrapError
	switch {
	case errors.Is(err, engine.ErrDeadline):
		return "deadline"
	case errors.As(err, &te):
		return "trap"
	}
	return "other"
}
