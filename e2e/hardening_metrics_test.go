package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// metricsURL serves tg's operator handler (its metrics) on a loopback port of
// its own, as `ludus gateway --metrics-addr` does, and returns its base URL:
// scrape(t, metricsURL(t, tg), hc) reads tg's metrics. It speaks HTTP/1.1 and
// h2c, like the gateway's port.
func metricsURL(t *testing.T, tg *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gateway.Serve(ctx, ln, tg.gw.OperatorHandler(), nil, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// TestHardeningMetricsOffPublicPort: the player port (the dev stack's, and a
// gateway's) serves no metrics — they are labelled by tenant — while the
// operator listener serves the gateway's series and, in the dev stack, the
// sim nodes' too.
func TestHardeningMetricsOffPublicPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A tenant-labelled series on the stack's gateway: an accepted input.
	pl, id := sharedGame(t, ctx, 1)
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := pl.games.SendInput(ctx, connect.NewRequest(&ludusv1.SendInputRequest{GameId: id, Seq: 1, Payload: []byte{1}})); err != nil {
		t.Fatal(err)
	}
	get := func(url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tg := startGateway(t, false, nil)
	for _, public := range []string{stack.GatewayURL, tg.url} {
		for _, path := range []string{"/metrics", "/metrics/", "/METRICS"} {
			code, body := get(public + path)
			if strings.Contains(body, "ludus_") || strings.Contains(body, "go_goroutines") || strings.Contains(body, stack.TenantID) {
				t.Fatalf("GET %s%s on the player port: %d with metrics:\n%.400s", public, path, code, body)
			}
		}
	}
	code, body := get(stack.MetricsURL + "/metrics")
	if code != http.StatusOK ||
		!strings.Contains(body, `ludus_gateway_inputs_total{tenant="`+stack.TenantID+`"}`) ||
		!strings.Contains(body, `ludus_tick_lateness_seconds_count{node="node-1"}`) ||
		!strings.Contains(body, "go_goroutines") {
		t.Fatalf("operator listener %s/metrics: %d\n%s", stack.MetricsURL, code, grepLines(body, "ludus_"))
	}
	if code, body := get(metricsURL(t, tg) + "/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("test gateway's operator listener: %d %.200s", code, body)
	}
}
