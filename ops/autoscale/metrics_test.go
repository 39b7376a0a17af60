package autoscale

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	state := &fleetState{free: FreeSessions([]Load{
		{Node: "a", Region: "eu", Capacity: 64, Games: 4},
		{Node: "b", Region: "eu", Capacity: 64, Draining: true},
		{Node: "c", Region: "us", Capacity: 8, Games: 8},
	})}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(state.read, 0))
	want := `
# HELP ludus_fleet_draining_nodes Sim nodes draining per region.
# TYPE ludus_fleet_draining_nodes gauge
ludus_fleet_draining_nodes{region="eu"} 1
ludus_fleet_draining_nodes{region="us"} 0
# HELP ludus_fleet_nodes Sim nodes registered per region, draining ones included.
# TYPE ludus_fleet_nodes gauge
ludus_fleet_nodes{region="eu"} 2
ludus_fleet_nodes{region="us"} 1
# HELP ludus_fleet_read_ok 1 when this scrape read the fleet's state, 0 when it failed (the per-region series are then absent).
# TYPE ludus_fleet_read_ok gauge
ludus_fleet_read_ok 1
# HELP ludus_free_sessions Free game sessions per region: capacity − games summed over the region's sim nodes that are not draining.
# TYPE ludus_free_sessions gauge
ludus_free_sessions{region="eu"} 60
ludus_free_sessions{region="us"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// A failed read: read_ok 0, no region series, and the scrape still works.
	state.free, state.err = nil, errors.New("etcd down")
	want = `
# HELP ludus_fleet_read_ok 1 when this scrape read the fleet's state, 0 when it failed (the per-region series are then absent).
# TYPE ludus_fleet_read_ok gauge
ludus_fleet_read_ok 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The collector bounds a read by its timeout.
func TestCollectorTimeout(t *testing.T) {
	slow := func(ctx context.Context) (map[string]Free, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(slow, 20*time.Millisecond))
	done := make(chan error, 1)
	go func() { _, err := reg.Gather(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a scrape waited for a Source that never answers")
	}
	if n, err := testutil.GatherAndCount(reg, "ludus_free_sessions"); err != nil || n != 0 {
		t.Errorf("ludus_free_sessions series after a timeout: %d (%v)", n, err)
	}
}

func TestNewCollectorNilSource(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewCollector(nil) did not panic")
		}
	}()
	NewCollector(nil, 0)
}
