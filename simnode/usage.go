package simnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Usage metering (issue 14). The node meters, per tenant, the CPU time of
// its ticks (the scheduler's cost of each tick: step, state hash, views),
// the input log appends it commits to etcd (writer.go) and the games that
// ended at their hard deadline (deadline.go). The totals are exported as
// ludus_tenant_cpu_seconds_total{tenant} and
// ludus_tenant_etcd_writes_total{tenant}; what is new since the last report
// goes to the backend about every UsageFlushInterval through a UsageSink
// (backend.UsageReporter), which also brings back the tenants'
// max_game_duration_s quotas.

// UsageSink takes metered usage and reports it (backend.UsageReporter).
type UsageSink interface {
	// Add merges one tenant's usage into the next report.
	Add(d *ludusv1.UsageDelta)
	// Flush reports and returns the max_game_duration_s quotas of the
	// reported tenants that have one.
	Flush(ctx context.Context) (map[string]int64, error)
}

// UsageFlushInterval is how often a node reports its usage.
const UsageFlushInterval = 10 * time.Second

// usageMeter holds every tenant's counters: lock-free to add to (one atomic
// add on the tick path), read by the flusher and by Prometheus.
type usageMeter struct {
	tenants sync.Map // tenant id -> *tenantUsage
	// sink, if set (SetUsageSink, before Start), receives the usage.
	sink UsageSink
	// maxDuration holds the tenants' max_game_duration_s quotas, as the
	// backend last answered (tenant id -> int64 seconds).
	maxDuration sync.Map
}

// tenantUsage is one tenant's counters: totals (for Prometheus) and what is
// not yet handed to the sink.
type tenantUsage struct {
	cpuNanos, etcdWrites, timedOut    atomic.Int64 // totals
	newCPU, newEtcdWrites, newTimeout atomic.Int64 // since the last flush
}

func newUsageMeter() *usageMeter { return &usageMeter{} }

// tenant returns a tenant's counters, creating them.
func (m *usageMeter) tenant(id string) *tenantUsage {
	if u, ok := m.tenants.Load(id); ok {
		return u.(*tenantUsage)
	}
	u, _ := m.tenants.LoadOrStore(id, &tenantUsage{})
	return u.(*tenantUsage)
}

func (u *tenantUsage) addCPU(d time.Duration) {
	if d <= 0 {
		return
	}
	u.cpuNanos.Add(int64(d))
	u.newCPU.Add(int64(d))
}

func (u *tenantUsage) addEtcdWrite() {
	u.etcdWrites.Add(1)
	u.newEtcdWrites.Add(1)
}

func (u *tenantUsage) addTimedOut() {
	u.timedOut.Add(1)
	u.newTimeout.Add(1)
}

// drain hands what is new since the last drain to sink. CPU time is handed
// in whole microseconds; the rest of a microsecond stays for the next drain.
func (m *usageMeter) drain(sink UsageSink) {
	m.tenants.Range(func(k, v any) bool {
		u := v.(*tenantUsage)
		ns := u.newCPU.Load()
		us := ns / 1000
		u.newCPU.Add(-us * 1000)
		d := &ludusv1.UsageDelta{TenantId: k.(string), CpuMicros: us, EtcdWrites: u.newEtcdWrites.Swap(0), GamesTimedOut: u.newTimeout.Swap(0)}
		if d.CpuMicros|d.EtcdWrites|d.GamesTimedOut != 0 {
			sink.Add(d)
		}
		return true
	})
}

// tenantMaxDuration returns the tenant's max_game_duration_s quota as last
// learned (0: none).
func (m *usageMeter) tenantMaxDuration(tenant string) int64 {
	if v, ok := m.maxDuration.Load(tenant); ok {
		return v.(int64)
	}
	return 0
}

// learnMaxDurations records the quotas a report brought back for its tenants:
// a reported tenant absent from them has none (any more).
func (m *usageMeter) learnMaxDurations(reported map[string]bool, quotas map[string]int64) {
	for t := range reported {
		if s, ok := quotas[t]; ok && s > 0 {
			m.maxDuration.Store(t, s)
		} else {
			m.maxDuration.Delete(t)
		}
	}
}

// flush drains the meter into the sink and reports.
func (m *usageMeter) flush(ctx context.Context) error {
	if m.sink == nil {
		return nil
	}
	reported := map[string]bool{}
	m.tenants.Range(func(k, _ any) bool { reported[k.(string)] = true; return true })
	m.drain(m.sink)
	quotas, err := m.sink.Flush(ctx)
	if err == nil {
		m.learnMaxDurations(reported, quotas)
	}
	return err
}

// usageCollector exports the meter's totals.
type usageCollector struct{ m *usageMeter }

var (
	tenantCPUDesc = prometheus.NewDesc("ludus_tenant_cpu_seconds_total",
		"CPU time of the tenant's ticks on this node (step, state hash, views on a worker): what quotas and billing count.", []string{"tenant"}, nil)
	tenantEtcdDesc = prometheus.NewDesc("ludus_tenant_etcd_writes_total",
		"Input log appends this node committed to etcd for the tenant's games.", []string{"tenant"}, nil)
)

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantCPUDesc
	ch <- tenantEtcdDesc
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.tenants.Range(func(k, v any) bool {
		u := v.(*tenantUsage)
		ch <- prometheus.MustNewConstMetric(tenantCPUDesc, prometheus.CounterValue, time.Duration(u.cpuNanos.Load()).Seconds(), k.(string))
		ch <- prometheus.MustNewConstMetric(tenantEtcdDesc, prometheus.CounterValue, float64(u.etcdWrites.Load()), k.(string))
		return true
	})
}

// SetUsageSink makes the node report its metered usage to sink (and learn
// its tenants' max_game_duration_s quotas from the answers). Call it before
// Start; without it usage is only exported as metrics.
func (n *Node) SetUsageSink(sink UsageSink) { n.sched.usage.sink = sink }

// startUsage registers the usage metrics and starts the flusher, which
// reports every UsageFlushInterval and once more when the node stops. Start
// calls it.
func (n *Node) startUsage() {
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"node": n.cfg.ID}, n.metrics.reg)
	if err := wrapped.Register(usageCollector{n.sched.usage}); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			n.log.Error("usage metrics not registered", "err", err)
		}
	}
	m := n.sched.usage
	if m.sink == nil {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(UsageFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := m.flush(ctx); err != nil {
					n.log.Warn("last usage report failed", "err", err)
				}
				cancel()
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
				if err := m.flush(ctx); err != nil && n.ctx.Err() == nil {
					n.log.Warn("usage report failed; it is sent again next time", "err", err)
				}
				cancel()
			}
		}
	}()
}
