package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/grpchealth"

	"ludus.dev/ludus/gateway"
	"ludus.dev/ludus/ops/etcdserver"
)

// TestServeUntilDoneGuardsBodies: the listener of the backend and the sim
// nodes (serveUntilDone) cuts a body trickled a byte at a time at the body
// deadline, with DeadlineExceeded, and answers a truncated gRPC envelope with
// InvalidArgument (connect-go alone: Internal).
func TestServeUntilDoneGuardsBodies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker()))
	go func() { done <- serveOn(ctx, ln, mux, 500*time.Millisecond, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr := ln.Addr().String()
	check := "/grpc.health.v1.Health/Check"

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\nContent-Length: 100\r\n\r\n", check)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	var got string
trickle:
	for time.Since(start) < 4*time.Second {
		select {
		case got = <-answer:
			break trickle
		case <-time.After(100 * time.Millisecond):
			_, _ = c.Write([]byte{0})
		}
	}
	if !strings.Contains(got, "deadline_exceeded") || time.Since(start) > 2*time.Second {
		t.Fatalf("trickled body: %q after %v, want deadline_exceeded after ~0.5 s", got, time.Since(start))
	}

	req, _ := http.NewRequest("POST", "http://"+addr+check, bytes.NewReader([]byte{0, 0, 0, 0, 9, 1}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := (&http.Client{Transport: gateway.H2CTransport()}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if st := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status"); st != "3" {
		t.Fatalf("truncated envelope: grpc-status %q (%s), want 3", st, resp.Header.Get("Grpc-Message")+resp.Trailer.Get("Grpc-Message"))
	}
}

// TestGatewayMetricsListener: `ludus gateway` serves no metrics on its
// player port; with --metrics-addr it serves them there.
func TestGatewayMetricsListener(t *testing.T) {
	dir := t.TempDir()
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	public, operator := free(), free()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, []string{"--etcd", es.Endpoint, "--listen", public, "--metrics-addr", operator, "--shutdown-delay", "0",
			"--cluster-token", "test-cluster-token-0123456789abcdef", "--backend", "http://127.0.0.1:1"}, slog.New(slog.DiscardHandler))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	get := func(url string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp.StatusCode, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", url, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if code, body := get("http://" + operator + "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("--metrics-addr /metrics: %d %.200s", code, body)
	}
	if code, body := get("http://" + public + "/metrics"); strings.Contains(body, "go_goroutines") {
		t.Fatalf("player port /metrics: %d with metrics", code)
	}
}

func TestParsePrefixes(t *testing.T) {
	if p, err := parsePrefixes(""); err != nil || p != nil {
		t.Fatalf(`"": %v %v, want nil (backend default: loopback)`, p, err)
	}
	if p, err := parsePrefixes("none"); err != nil || p == nil || len(p) != 0 {
		t.Fatalf(`"none": %v %v, want an empty list`, p, err)
	}
	p, err := parsePrefixes("10.0.1.7, 10.0.2.0/24,fd00::/8")
	if err != nil || fmt.Sprint(p) != "[10.0.1.7/32 10.0.2.0/24 fd00::/8]" {
		t.Fatalf("list: %v %v", p, err)
	}
	if _, err := parsePrefixes("gateway-1"); err == nil {
		t.Fatal("a host name was accepted")
	}
}

// TestGatewayStopsGracefully: on SIGTERM (its context done) the gateway
// reports NOT_SERVING at once and goes on serving for --shutdown-delay, so
// that load balancers take it out of rotation before its listener closes;
// a request still in flight when --shutdown-grace ends is cut, and the role
// returns nil all the same (exit 0: stopping is not a failure).
func TestGatewayStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	es, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: filepath.Join(dir, "etcd"), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	public := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, []string{"--etcd", es.Endpoint, "--listen", public, "--shutdown-delay", "1s", "--shutdown-grace", "500ms",
			"--cluster-token", "test-cluster-token-0123456789abcdef", "--backend", "http://127.0.0.1:1"}, slog.New(slog.DiscardHandler))
	}()
	health := func() string {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
		resp, err := c.Post("http://"+public+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader("{}"))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(health(), `"SERVING_STATUS_SERVING"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never reported SERVING: %s", health())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A request in flight that outlasts the grace period: a body that never
	// ends (its read deadline is far longer).
	slow, err := net.Dial("tcp", public)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /ludus.v1.AuthService/Guest HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", public)
	time.Sleep(100 * time.Millisecond)

	stopped := time.Now()
	cancel()
	if h := health(); !strings.Contains(h, "SERVING_STATUS_NOT_SERVING") {
		t.Fatalf("health during the shutdown delay: %s, want NOT_SERVING", h)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the gateway's stop: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway had not stopped 10 s after its context ended")
	}
	if took := time.Since(stopped); took < 1500*time.Millisecond {
		t.Fatalf("stopped after %v, before its delay and grace period (1.5 s)", took)
	}
}
