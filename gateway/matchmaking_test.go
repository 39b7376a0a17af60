package gateway

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"ludus.dev/ludus/clusterstate"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// Each account's MatchmakingService calls (FindMatch and CreateParty
// together) share a token bucket: over the burst a call is refused with
// ResourceExhausted before it reaches the matchmaker, and another account
// is not held up.
func TestMatchmakingCallRate(t *testing.T) {
	t.Parallel()
	gw, err := New(Config{
		Etcd: clusterstate.New(testEtcd(t)), Verifier: newFakeVerifier(), BackendURL: "http://127.0.0.1:1",
		ClusterToken: fakeClusterToken, Logger: slog.New(slog.DiscardHandler), Matchmaking: true,
		// A rate so slow that no token comes back during the test.
		Limits: Limits{MatchmakingCallsPerSecond: 0.001, MatchmakingBurst: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	mm := ludusv1connect.NewMatchmakingServiceClient(h2cClient(), serveH2C(t, gw.Handler()).URL)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	createParty := func(ticket string) error {
		req := connect.NewRequest(&ludusv1.CreatePartyRequest{Mode: "nosuchmode", Size: 2})
		req.Header().Set("Authorization", "Bearer "+ticket)
		_, err := mm.CreateParty(ctx, req)
		return err
	}
	findMatch := func(ticket string) error {
		req := connect.NewRequest(&ludusv1.FindMatchRequest{Mode: "nosuchmode", RttMs: map[string]int32{"local": 20}})
		req.Header().Set("Authorization", "Bearer "+ticket)
		s, err := mm.FindMatch(ctx, req)
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	// The burst: the calls reach the matchmaker, which knows no such mode.
	for i, call := range []func(string) error{createParty, findMatch, createParty} {
		if err := call(ticketAlice); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("call %d of the burst: %v, want the matchmaker's NotFound", i, err)
		}
	}
	for name, call := range map[string]func(string) error{"CreateParty": createParty, "FindMatch": findMatch} {
		err := call(ticketAlice)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "at most 0.001 matchmaking calls per second per account (bursts of 3)") {
			t.Errorf("%s over the burst: %v, want ResourceExhausted naming the limit", name, err)
		}
	}
	if got := testutil.ToFloat64(gw.metrics.limitRejected.WithLabelValues(tenantT1, "matchmaking_rate")); got != 2 {
		t.Errorf("limit_rejections_total{limit=matchmaking_rate} = %v, want 2", got)
	}
	if err := createParty(ticketBob); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("another account: %v, want the matchmaker's NotFound", err)
	}
	// No ticket: Unauthenticated, as before, not counted against anybody.
	if err := createParty(""); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no ticket: %v", err)
	}
}
