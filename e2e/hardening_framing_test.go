package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// TestHardeningMalformedFraming: a client's framing errors — a gRPC,
// gRPC-Web or Connect-streaming envelope cut short, a compressed flag with no
// encoding, a unary body shorter than its Content-Length, garbage protobuf —
// are InvalidArgument (grpc-status 3, Connect "invalid_argument"), never
// Internal or Unknown: client garbage must not trip server-error alerts. Also
// through the pass-through to the backend.
func TestHardeningMalformedFraming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := startGateway(t, false, nil)
	h1, _ := transports[0].client(tg)
	h2, _ := transports[1].client(tg)
	pl := loginAt(t, h2, tg.url)

	// post sends body and returns the gRPC status (header, trailer or, for
	// gRPC-Web, the trailer frame) or the Connect HTTP status and body.
	post := func(hc *http.Client, path, ctype string, body []byte, hdr ...string) (status string, text string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", tg.url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+pl.ticket)
		if strings.HasPrefix(ctype, "application/grpc") && !strings.HasPrefix(ctype, "application/grpc-web") {
			req.Header.Set("Te", "trailers")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if st := resp.Header.Get("Grpc-Status") + resp.Trailer.Get("Grpc-Status"); st != "" {
			return st, resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Message")
		}
		if i := bytes.Index(b, []byte("grpc-status:")); i >= 0 && strings.HasPrefix(ctype, "application/grpc-web") {
			line, _, _ := strings.Cut(string(b[i+len("grpc-status:"):]), "\r\n")
			return strings.TrimSpace(line), string(b)
		}
		return fmt.Sprint(resp.StatusCode), string(b)
	}
	list := ludusv1connect.GameServiceListGamesProcedure
	for _, tc := range []struct {
		name, path, ctype string
		hc                *http.Client
		body              []byte
	}{
		{"grpc truncated payload", list, "application/grpc", h2, []byte{0, 0, 0, 0, 10, 1, 2, 3}},
		{"grpc truncated prefix", list, "application/grpc", h2, []byte{0, 0, 0}},
		{"grpc compressed flag without encoding", list, "application/grpc", h2, []byte{1, 0, 0, 0, 0}},
		{"grpc bad flags", list, "application/grpc", h2, []byte{0x80, 0, 0, 0, 0}},
		{"grpc garbage protobuf", list, "application/grpc", h2, []byte{0, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff}},
		{"grpc-web truncated payload", list, "application/grpc-web+proto", h1, []byte{0, 0, 0, 0, 10, 1, 2}},
		{"grpc truncated, passed to the backend", ludusv1connect.AuthServiceGuestLoginProcedure, "application/grpc", h2, []byte{0, 0, 0, 0, 50, 10, 4}},
	} {
		st, msg := post(tc.hc, tc.path, tc.ctype, tc.body)
		if st != "3" {
			t.Errorf("%s: grpc-status %s (%s), want 3 (InvalidArgument)", tc.name, st, msg)
		} else {
			t.Logf("%s: %s %s", tc.name, st, msg)
		}
	}
	// Connect streaming (a server stream's request is one enveloped message):
	// the error is in the end-of-stream message.
	st, text := post(h2, ludusv1connect.GameServiceStreamFramesProcedure, "application/connect+proto", []byte{0, 0, 0, 0, 10, 1, 2})
	if st != "200" || !strings.Contains(text, `"invalid_argument"`) {
		t.Errorf("connect streaming truncated envelope: %s %q, want invalid_argument in the end-of-stream message", st, text)
	}
	if st, text := post(h1, list, "application/proto", []byte{0xff, 0xff, 0xff, 0xff}); st != "400" || !strings.Contains(text, "invalid_argument") {
		t.Errorf("connect garbage protobuf: %s %s", st, text)
	}

	// A Connect unary body shorter than its Content-Length (the client stops
	// sending and closes its side): raw HTTP/1.1.
	for _, path := range []string{list, ludusv1connect.AuthServiceGuestLoginProcedure} {
		addr := strings.TrimPrefix(tg.url, "http://")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/proto\r\nContent-Length: 50\r\n\r\n0123456789", path, addr)
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s short body: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_argument") {
			t.Errorf("%s: Connect unary body shorter than its Content-Length: %s %s, want 400 invalid_argument", path, resp.Status, b)
		}
	}
}
