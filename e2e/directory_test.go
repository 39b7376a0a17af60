package e2e

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// gatewayEtcdReads reads ludus_gateway_etcd_reads_total from a gateway's registry.
func gatewayEtcdReads(t *testing.T, gw *gateway.Gateway) float64 {
	t.Helper()
	mfs, err := gw.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ludus_gateway_etcd_reads_total" {
			var m *dto.Metric = mf.GetMetric()[0]
			return m.GetCounter().GetValue()
		}
	}
	t.Fatal("no ludus_gateway_etcd_reads_total")
	return 0
}

// The gateway routes calls from a directory fed by a watch: sending 1,000
// inputs (and joining, and streaming) reads etcd no more than a handful of
// times, where the first version read it twice per input.
func TestRoutingReadsNoEtcdPerInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tg := startGateway(t, false, func(c *gateway.Config) {
		c.Limits.InputsPerSecond, c.Limits.InputBurst = 100000, 100000
	})
	pl := loginAt(t, protocols()[0].client, tg.url)
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}})); err != nil {
		t.Fatal(err)
	}
	before := gatewayEtcdReads(t, tg.gw)
	var seq atomic.Uint64
	seq.Store(1)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < 40; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s := seq.Add(1)
				if s > 1001 {
					return
				}
				if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: s, Payload: []byte{byte(s % 16)}})); err != nil {
					failed.Add(1)
					t.Errorf("input %d: %v", s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	reads := gatewayEtcdReads(t, tg.gw) - before
	t.Logf("1,000 inputs: %.0f etcd reads by the gateway", reads)
	if reads > 3 {
		t.Fatalf("1,000 inputs cost the gateway %.0f etcd reads; routing must read the directory", reads)
	}
}
