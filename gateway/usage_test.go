package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

type recordingSink struct {
	got map[string]*ludusv1.UsageDelta
}

func (s *recordingSink) Add(d *ludusv1.UsageDelta) {
	a := s.got[d.TenantId]
	if a == nil {
		a = &ludusv1.UsageDelta{TenantId: d.TenantId}
		s.got[d.TenantId] = a
	}
	a.PlayerMillis += d.PlayerMillis
	a.StreamBytes += d.StreamBytes
}

func (s *recordingSink) Flush(context.Context) (map[string]int64, error) { return nil, nil }

// TestAdmissionUsageMeter (gateway usage): player time is the open player
// and Play streams × time, spectators excluded; stream bytes are every
// stream's, each counted once.
func TestAdmissionUsageMeter(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	u := newUsageMeter(m)
	sink := &recordingSink{got: map[string]*ludusv1.UsageDelta{}}
	p1 := m.streamOpened("t1", kindPlayer)
	m.streamOpened("t1", kindPlay)
	m.streamOpened("t1", kindSpectator)
	m.streamOpened("t2", kindPlayer)
	m.meter("t1", kindSpectator).frame(1, 1000)
	m.meter("t1", kindPlayer).frame(1, 500)
	u.sample(time.Second)
	u.sample(1500 * time.Microsecond)
	p1() // one of t1's players leaves
	u.sample(time.Second)
	u.drain(sink)
	if g := sink.got["t1"]; g == nil || g.PlayerMillis != 2*1001.5+1000 || g.StreamBytes != 1500 {
		t.Fatalf("t1 = %+v, want 3003 player ms and 1500 bytes", g)
	}
	if g := sink.got["t2"]; g == nil || g.PlayerMillis != 2001 || g.StreamBytes != 0 {
		t.Fatalf("t2 = %+v, want 2001 player ms (the half ms waits)", g)
	}
	m.meter("t2", kindPlayer).frame(2, 10)
	u.sample(500 * time.Microsecond)
	u.drain(sink)
	if g := sink.got["t1"]; g.PlayerMillis != 3003 || g.StreamBytes != 1500 {
		t.Fatalf("t1 after a second drain = %+v, want 3003 ms (half a ms waits) and no bytes again", g)
	}
	if g := sink.got["t2"]; g.PlayerMillis != 2002 || g.StreamBytes != 10 {
		t.Fatalf("t2 after a second drain = %+v, want 2002 ms (remainders add up) and 10 bytes", g)
	}
}
