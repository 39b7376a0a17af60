package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/gateway"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// trickleTo sends an HTTP/1.1 request to addr announcing a 1000-byte body
// and then one byte every 200 ms for at most d. It returns the answer (status
// line and body; "" if none came while it trickled) and when it came.
func trickleTo(t *testing.T, addr, path, ctype string, d time.Duration) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\n", path, addr, ctype)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answer <- "no response: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < d {
		select {
		case a := <-answer:
			return a, time.Since(start)
		case <-tick.C:
			_, _ = c.Write([]byte{'x'})
		}
	}
	return "", time.Since(start)
}

// TestHardeningBodyTimeout: with a 1 s body deadline, a client trickling a
// body a byte at a time holds a GameService call or a pass-through call for
// about 1 s, not for as long as it likes: it gets DeadlineExceeded. A Play
// stream (bidirectional) is not under that deadline: it stays open while
// its client sends nothing for longer.
func TestHardeningBodyTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg := startGateway(t, false, func(c *gateway.Config) { c.Limits.BodyReadTimeout = time.Second })
	addr := strings.TrimPrefix(tg.url, "http://")
	for _, path := range []string{
		ludusv1connect.GameServiceListGamesProcedure,  // read by the gateway, before the ticket is checked
		ludusv1connect.AuthServiceGuestLoginProcedure, // passed to the backend
	} {
		got, took := trickleTo(t, addr, path, "application/proto", 5*time.Second)
		if !strings.Contains(got, "deadline_exceeded") || took > 3*time.Second {
			t.Fatalf("%s with a trickled body: answer %q after %v, want deadline_exceeded after ~1 s", path, got, took.Round(time.Millisecond))
		}
		t.Logf("%s: %q after %v", path, got, took.Round(time.Millisecond))
	}

	// gRPC over h2c: the envelope is sent, its payload trickles.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		_, _ = pw.Write([]byte{0, 0, 0, 0, 100})
		for range 25 {
			time.Sleep(200 * time.Millisecond)
			if _, err := pw.Write([]byte{0}); err != nil {
				return
			}
		}
	}()
	hc, _ := transports[1].client(tg)
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "POST", tg.url+ludusv1connect.GameServiceSendInputProcedure, pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if st := resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status"); st != "4" || time.Since(start) > 3*time.Second {
		t.Fatalf("trickled gRPC body: grpc-status %q after %v", st, time.Since(start))
	}

	// Play: idle for twice the body deadline, then an input is acknowledged.
	pl := loginAt(t, hc, tg.url, connect.WithGRPC())
	g, err := pl.games.CreateGame(ctx, connect.NewRequest(&ludusv1.CreateGameRequest{ModuleName: "arena", Bots: 1}))
	if err != nil {
		t.Fatal(err)
	}
	id := g.Msg.Game.GameId
	if _, err := pl.games.JoinGame(ctx, connect.NewRequest(&ludusv1.JoinGameRequest{GameId: id})); err != nil {
		t.Fatal(err)
	}
	play := pl.games.Play(ctx)
	defer play.CloseResponse()
	if err := play.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Start{Start: &ludusv1.PlayStart{GameId: id}}}); err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	go func() {
		for {
			m, err := play.Receive()
			if err != nil {
				acked <- err
				return
			}
			if m.GetAck() != nil {
				acked <- nil
				return
			}
		}
	}()
	time.Sleep(2 * time.Second)
	if err := play.Send(&ludusv1.PlayRequest{Msg: &ludusv1.PlayRequest_Input{Input: &ludusv1.PlayInput{Seq: 1, Payload: []byte{1}}}}); err != nil {
		t.Fatalf("Play input after 2 s idle: %v", err)
	}
	select {
	case err := <-acked:
		if err != nil {
			t.Fatalf("Play stream after 2 s idle: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no ack")
	}
}
