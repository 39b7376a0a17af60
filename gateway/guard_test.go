package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	_ "ludus.dev/ludus/gen/ludus/cluster/v1/clusterv1connect"
	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// serveGuarded serves h behind GuardBodies(timeout) on a loopback port with
// the gateway's server (HTTP/1.1 and h2c) and returns its address.
func serveGuarded(t *testing.T, h http.Handler, timeout time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = Serve(ctx, ln, GuardBodies(h, timeout), nil, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// readBody reads the whole body and answers with the connect code of the
// error (or "ok") and how long the read took.
func readBody(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, err := io.Copy(io.Discard, r.Body)
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	fmt.Fprintf(w, "%s %v", code, time.Since(start).Round(10*time.Millisecond))
}

// trickle sends an HTTP/1.1 request announcing a 1000-byte body and then one
// byte every 100 ms, for at most d; it returns the server's answer (status
// line and body) and when it came, or "" if none came while it trickled.
func trickle(t *testing.T, addr, path, ctype string, d time.Duration) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\n", path, ctype)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answer <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
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

// TestGuardBodiesCutsTrickledBody: a body trickled a byte at a time is cut at
// the deadline (the handler's read fails with DeadlineExceeded and it answers)
// on a unary path, and not on a client-streaming one (Play).
func TestGuardBodiesCutsTrickledBody(t *testing.T) {
	addr := serveGuarded(t, http.HandlerFunc(readBody), 500*time.Millisecond)
	got, took := trickle(t, addr, ludusv1connect.GameServiceListGamesProcedure, "application/proto", 4*time.Second)
	if !strings.Contains(got, "deadline_exceeded") || took > 2*time.Second {
		t.Fatalf("trickled unary body: answer %q after %v, want deadline_exceeded within ~0.5 s", got, took)
	}
	t.Logf("unary: %q after %v", got, took.Round(time.Millisecond))
	got, took = trickle(t, addr, ludusv1connect.GameServicePlayProcedure, "application/connect+proto", 1500*time.Millisecond)
	if got != "" {
		t.Fatalf("client-streaming body cut: %q after %v", got, took)
	}
}

// TestGuardBodiesLetsSteadyUploadThrough: a body that takes longer than the
// timeout but arrives faster than MinBodyRate is read whole, and once read the
// handler may take longer than the timeout to answer (over HTTP/1.1 an expired
// read deadline would cancel its context).
func TestGuardBodiesLetsSteadyUploadThrough(t *testing.T) {
	addr := serveGuarded(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			http.Error(w, "context ended after the body was read", 500)
			return
		}
		fmt.Fprintf(w, "%d", n)
	}), 200*time.Millisecond)
	// 192 KiB in 32 KiB chunks every 100 ms (~320 KiB/s, ~0.6 s in all).
	steady := func() io.Reader {
		pr, pw := io.Pipe()
		go func() {
			chunk := bytes.Repeat([]byte{'x'}, 32<<10)
			for range 6 {
				time.Sleep(100 * time.Millisecond)
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			pw.Close()
		}()
		return pr
	}
	for _, h2 := range []bool{false, true} {
		p := new(http.Protocols)
		if h2 {
			p.SetUnencryptedHTTP2(true)
		} else {
			p.SetHTTP1(true)
		}
		hc := &http.Client{Transport: &http.Transport{Protocols: p}}
		resp, err := hc.Post("http://"+addr+ludusv1connect.AdminServiceUploadModuleProcedure, "application/proto", steady())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != fmt.Sprint(192<<10) {
			t.Fatalf("h2=%v: steady upload: %s %q", h2, resp.Status, b)
		}
	}
}

// TestGuardBodiesHTTP2: over h2c a trickled unary body is cut as well.
func TestGuardBodiesHTTP2(t *testing.T) {
	addr := serveGuarded(t, http.HandlerFunc(readBody), 500*time.Millisecond)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		for range 40 {
			time.Sleep(100 * time.Millisecond)
			if _, err := pw.Write([]byte{'x'}); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	resp, err := (&http.Client{Transport: H2CTransport()}).Post("http://"+addr+ludusv1connect.GameServiceSendInputProcedure, "application/proto", pr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), "deadline_exceeded") || time.Since(start) > 2*time.Second {
		t.Fatalf("h2c trickle: %q after %v", b, time.Since(start))
	}
}

func TestClientStreaming(t *testing.T) {
	_ = grpcreflect.NewStaticReflector // links the reflection descriptors
	for path, want := range map[string]bool{
		ludusv1connect.GameServicePlayProcedure:                          true,
		"/ludus.cluster.v1.NodeService/Inputs":                           true,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
		ludusv1connect.GameServiceStreamFramesProcedure:                  false,
		ludusv1connect.GameServiceListGamesProcedure:                     false,
		ludusv1connect.AdminServiceUploadModuleProcedure:                 false,
		"/ludus.v1.GameService/Nope":                                     false,
		"/index.html":                                                    false,
		"/":                                                              false,
	} {
		if got := clientStreaming(path); got != want {
			t.Errorf("clientStreaming(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestEnvelopeScan feeds bodies to a guardedBody in chunks of every size and
// checks which are refused, with InvalidArgument.
func TestEnvelopeScan(t *testing.T) {
	env := func(flags byte, payload ...byte) []byte {
		n := len(payload)
		return append([]byte{flags, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, payload...)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	cases := []struct {
		name       string
		fr         framing
		compressed bool
		body       []byte
		bad        string // "" if accepted
	}{
		{"one message", framingGRPC, false, env(0, 1, 2, 3), ""},
		{"empty message", framingGRPC, false, env(0), ""},
		{"two messages", framingGRPC, false, cat(env(0, 1), env(0, 2, 3)), ""},
		{"empty body", framingGRPC, false, nil, ""},
		{"truncated payload", framingGRPC, false, env(0, 1, 2, 3)[:7], "short of"},
		{"truncated prefix", framingGRPC, false, []byte{0, 0, 0}, "inside an envelope prefix"},
		{"second truncated", framingGRPC, false, cat(env(0, 1), []byte{0, 0}), "inside an envelope prefix"},
		{"compressed without encoding", framingGRPC, false, env(1), "compressed flag"},
		{"compressed with encoding", framingGRPC, true, env(1, 9), ""},
		{"grpc trailer flag", framingGRPC, false, env(0x80), "flags 0x80"},
		{"connect end of stream", framingConnect, false, cat(env(0, 1), env(2, '{', '}')), ""},
		{"connect data after end", framingConnect, false, cat(env(2), env(0, 1)), "after the end-of-stream"},
		{"connect bad flags", framingConnect, false, env(4), "flags 0x04"},
		{"unframed", framingNone, false, []byte{0, 0, 0}, ""},
	}
	for _, tc := range cases {
		for chunk := 1; chunk <= len(tc.body)+1; chunk++ {
			b := &guardedBody{body: io.NopCloser(&chunkReader{b: tc.body, n: chunk}), ctx: context.Background(),
				framing: tc.fr, compressed: tc.compressed}
			_, err := io.ReadAll(b)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("%s (chunks of %d): %v", tc.name, chunk, err)
			case tc.bad != "" && (connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), tc.bad)):
				t.Fatalf("%s (chunks of %d): got %v, want invalid_argument mentioning %q", tc.name, chunk, err, tc.bad)
			}
		}
	}
}

type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func TestBodyReadErrors(t *testing.T) {
	b := &guardedBody{ctx: context.Background()}
	for err, want := range map[error]connect.Code{
		io.ErrUnexpectedEOF:                          connect.CodeInvalidArgument,
		errors.New("malformed chunked"):              connect.CodeInvalidArgument,
		fmt.Errorf("x: %w", timeoutErr{}):            connect.CodeDeadlineExceeded,
		&net.OpError{Op: "read", Err: net.ErrClosed}: connect.CodeCanceled,
	} {
		if got := connect.CodeOf(b.mapError(err)); got != want {
			t.Errorf("%v: %v, want %v", err, got, want)
		}
	}
	if b.mapError(&http.MaxBytesError{Limit: 1}) != nil {
		t.Error("MaxBytesError mapped: connect-go reports it as ResourceExhausted itself")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if (&guardedBody{ctx: ctx}).mapError(errors.New("stream reset")) != nil {
		t.Error("error of a canceled request mapped: connect-go reports it as Canceled itself")
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestPassThroughLimit(t *testing.T) {
	l := DefaultLimits
	for path, want := range map[string]int64{
		ludusv1connect.AuthServiceGuestLoginProcedure:    16 << 10,
		ludusv1connect.AuthServiceEmailLoginProcedure:    16 << 10,
		ludusv1connect.AdminServiceUploadModuleProcedure: 33 << 20,
		ludusv1connect.AdminServiceCreateTenantProcedure: 256 << 10,
		ludusv1connect.FleetServiceDrainNodeProcedure:    256 << 10,
		"/.well-known/jwks.json":                         256 << 10,
	} {
		if got := l.passThroughLimit(path); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	}
}
