package simnode

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// fakeSink is a UsageSink that records what it is given.
type fakeSink struct {
	mu      sync.Mutex
	added   map[string]*ludusv1.UsageDelta
	flushes int
	quotas  map[string]int64
	err     error
}

func (f *fakeSink) Add(d *ludusv1.UsageDelta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.added == nil {
		f.added = map[string]*ludusv1.UsageDelta{}
	}
	a := f.added[d.TenantId]
	if a == nil {
		a = &ludusv1.UsageDelta{TenantId: d.TenantId}
		f.added[d.TenantId] = a
	}
	a.CpuMicros += d.CpuMicros
	a.EtcdWrites += d.EtcdWrites
	a.GamesTimedOut += d.GamesTimedOut
}

func (f *fakeSink) Flush(context.Context) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes++
	return f.quotas, f.err
}

// TestSchedulerMetersUsage: every tick's cost released to the scheduler is
// charged to its tenant's usage, exported as ludus_tenant_cpu_seconds_total
// and handed to the sink once, in whole microseconds (the remainder stays
// for the next flush).
func TestSchedulerMetersUsage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newScheduler(2)
	go s.run(ctx)
	a, b := s.newTicket("a"), s.newTicket("b")
	a2 := s.newTicket("a") // a second game of tenant a
	for _, tk := range []*ticket{a, b, a2} {
		s.register(ctx, tk)
	}
	tick := func(tk *ticket, cost time.Duration) {
		if !s.acquire(ctx, tk) {
			t.Fatal("no slot")
		}
		s.release(ctx, tk, cost)
	}
	for range 3 {
		tick(a, 1500*time.Microsecond+300) // 1.5003 ms
		tick(a2, time.Millisecond)
		tick(b, 2*time.Millisecond)
	}
	s.usage.tenant("b").addEtcdWrite()

	reg := prometheus.NewRegistry()
	reg.MustRegister(usageCollector{s.usage})
	want := `
# HELP ludus_tenant_cpu_seconds_total CPU time of the tenant's ticks on this node (step, state hash, views on a worker): what quotas and billing count.
# TYPE ludus_tenant_cpu_seconds_total counter
ludus_tenant_cpu_seconds_total{tenant="a"} 0.0075009
ludus_tenant_cpu_seconds_total{tenant="b"} 0.006
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ludus_tenant_cpu_seconds_total"); err != nil {
		t.Fatal(err)
	}

	sink := &fakeSink{quotas: map[string]int64{"a": 600}}
	s.usage.sink = sink
	if err := s.usage.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.added["a"]; got == nil || got.CpuMicros != 7500 {
		t.Fatalf("tenant a handed %+v, want 7500 µs (the 0.9 µs left waits)", got)
	}
	if got := sink.added["b"]; got == nil || got.CpuMicros != 6000 || got.EtcdWrites != 1 {
		t.Fatalf("tenant b handed %+v, want 6000 µs and 1 etcd write", got)
	}
	// Nothing new: nothing handed again, but the sink is still flushed (a
	// report it could not send before goes out).
	if err := s.usage.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if sink.added["a"].CpuMicros != 7500 || sink.added["b"].CpuMicros != 6000 || sink.flushes != 2 {
		t.Fatalf("second flush handed usage again: a %+v b %+v, flushes %d", sink.added["a"], sink.added["b"], sink.flushes)
	}
	tick(a, 100*time.Nanosecond) // 0.9 µs + 0.1 µs = 1 µs
	s.usage.flush(ctx)
	if sink.added["a"].CpuMicros != 7501 {
		t.Fatalf("remainders lost: tenant a handed %d µs in all, want 7501", sink.added["a"].CpuMicros)
	}
	// The backend's answer sets the tenants' duration quotas; a reported
	// tenant without one in the answer has none.
	if d := s.usage.tenantMaxDuration("a"); d != 600 {
		t.Fatalf("tenant a's max duration = %d, want 600", d)
	}
	sink.quotas = nil
	s.usage.flush(ctx)
	if d := s.usage.tenantMaxDuration("a"); d != 0 {
		t.Fatalf("tenant a's max duration after its quota was lifted = %d, want 0", d)
	}
}

// TestUsageMeterConcurrent: adds from many goroutines while flushes drain
// lose and double nothing.
func TestUsageMeterConcurrent(t *testing.T) {
	m := newUsageMeter()
	sink := &fakeSink{}
	m.sink = sink
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := m.tenant("t")
			for range 1000 {
				u.addCPU(time.Microsecond)
				u.addEtcdWrite()
			}
		}()
	}
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			default:
				m.flush(context.Background())
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-flushed
	m.flush(context.Background())
	if got := sink.added["t"]; got.CpuMicros != 8000 || got.EtcdWrites != 8000 {
		t.Fatalf("handed %+v, want 8000 µs and 8000 writes", got)
	}
}
