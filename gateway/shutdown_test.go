package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestShutdownDelaysThenCutsStreams: once its context is done, a server
// reports itself unready first, goes on taking new connections for the
// delay (load balancers still send some), then closes its listener, and
// cuts the streams still open after the grace period. That is a normal
// stop: ServeUntil returns nil (the role exits 0, not 1).
func TestShutdownDelaysThenCutsStreams(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	streamEnded := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	mux.Handle("/stream", streamingHandler(streamEnded))
	var unready atomic.Int64 // when, in ns since start
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const delay, grace = 600 * time.Millisecond, 400 * time.Millisecond
	served := make(chan error, 1)
	go func() {
		served <- ServeUntil(ctx, ln, mux, nil, nil, Shutdown{
			Unready: func() { unready.Store(int64(time.Since(start))) }, Delay: delay, Grace: grace})
	}()

	// A stream that never ends on its own, on a connection of its own.
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	streamClient := &http.Client{Transport: &http.Transport{Protocols: p}}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/stream", nil)
	resp, err := streamClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	stopAt := time.Since(start)
	cancel()
	eventually(t, "unready", func() bool { return unready.Load() != 0 })
	if d := time.Duration(unready.Load()) - stopAt; d > 200*time.Millisecond {
		t.Fatalf("unready %v after the stop, want at once", d)
	}
	// During the delay a new connection is still served.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if r, err := fresh.Get("http://" + addr + "/ping"); err != nil {
		t.Fatalf("a new connection during the delay: %v", err)
	} else {
		r.Body.Close()
	}
	select {
	case err := <-served:
		t.Fatalf("stopped during the delay: %v", err)
	case <-streamEnded:
		t.Fatal("the stream was cut during the delay")
	case <-time.After(delay / 2):
	}
	// After the delay the listener is closed: new connections are refused.
	eventually(t, "the listener closed", func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if closed := time.Since(start) - stopAt; closed > 2*delay {
		t.Fatalf("the listener closed %v after the stop; want about the delay (%v)", closed, delay)
	}
	// After the grace period the stream is cut and the server returns nil.
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeUntil: %v, want nil for streams cut at the end of the grace period", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server had not stopped 5 s after its grace period")
	}
	if took := time.Since(start) - stopAt; took < delay+grace {
		t.Fatalf("stopped %v after the stop, before the delay and grace (%v)", took, delay+grace)
	}
	select {
	case <-streamEnded:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream's handler still runs after the server stopped")
	}
}
