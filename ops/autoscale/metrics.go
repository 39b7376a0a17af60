package autoscale

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCollectTimeout bounds one read of the Source by the collector when
// NewCollector is given no timeout.
const DefaultCollectTimeout = 2 * time.Second

var (
	freeSessionsDesc = prometheus.NewDesc("ludus_free_sessions",
		"Free game sessions per region: capacity − games summed over the region's sim nodes that are not draining.",
		[]string{"region"}, nil)
	fleetNodesDesc = prometheus.NewDesc("ludus_fleet_nodes",
		"Sim nodes registered per region, draining ones included.", []string{"region"}, nil)
	drainingNodesDesc = prometheus.NewDesc("ludus_fleet_draining_nodes",
		"Sim nodes draining per region.", []string{"region"}, nil)
	fleetReadDesc = prometheus.NewDesc("ludus_fleet_read_ok",
		"1 when this scrape read the fleet's state, 0 when it failed (the per-region series are then absent).", nil, nil)
)

// collector reads a Source on every scrape.
type collector struct {
	src     Source
	timeout time.Duration
}

// NewCollector returns a Prometheus collector that reads src on every scrape
// (bounded by timeout; 0 is DefaultCollectTimeout) and reports
// ludus_free_sessions{region}, ludus_fleet_nodes{region},
// ludus_fleet_draining_nodes{region} and ludus_fleet_read_ok. A failed read
// reports ludus_fleet_read_ok 0 and no region series, rather than failing the
// whole scrape. Every process serving it reports the same fleet-wide values:
// aggregate with max by (region), not sum. It panics if src is nil.
func NewCollector(src Source, timeout time.Duration) prometheus.Collector {
	if src == nil {
		panic("autoscale: NewCollector needs a Source")
	}
	if timeout <= 0 {
		timeout = DefaultCollectTimeout
	}
	return &collector{src: src, timeout: timeout}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- freeSessionsDesc
	ch <- fleetNodesDesc
	ch <- drainingNodesDesc
	ch <- fleetReadDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	free, err := c.src(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(fleetReadDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(fleetReadDesc, prometheus.GaugeValue, 1)
	for region, f := range free {
		ch <- prometheus.MustNewConstMetric(freeSessionsDesc, prometheus.GaugeValue, float64(f.Sessions), region)
		ch <- prometheus.MustNewConstMetric(fleetNodesDesc, prometheus.GaugeValue, float64(f.Nodes), region)
		ch <- prometheus.MustNewConstMetric(drainingNodesDesc, prometheus.GaugeValue, float64(f.Draining), region)
	}
}
