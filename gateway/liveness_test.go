package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
)

// streamingHandler streams a few bytes every 20 ms until its request ends,
// and reports when it ended.
func streamingHandler(ended chan<- struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("content-type", "application/octet-stream")
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
				if _, err := w.Write([]byte("tick")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	})
}

// serveLiveness serves h on a loopback port with short liveness bounds.
func serveLiveness(t *testing.T, h http.Handler, l liveness) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(h, nil, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// A client that opens a stream and then falls silent (answers no ping, as a
// client whose network vanished) has its connection closed, which ends the
// stream's request; a client that answers pings keeps its stream.
func TestSilentClientsAreDropped(t *testing.T) {
	l := liveness{pingAfter: 200 * time.Millisecond, pingTimeout: 200 * time.Millisecond, ackTimeout: 5 * time.Second}

	t.Run("silent", func(t *testing.T) {
		ended := make(chan struct{})
		addr := serveLiveness(t, streamingHandler(ended), l)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The client preface, its settings and one request, by hand, then
		// nothing: no settings ack, no ping answer, no window update.
		var hdr bytes.Buffer
		enc := hpack.NewEncoder(&hdr)
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr}, {":path", "/stream"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(c, c)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the stream of a client that answers no ping was still open after 5 s (pings after 200 ms, 200 ms to answer)")
		}
	})

	t.Run("answering", func(t *testing.T) {
		ended := make(chan struct{})
		addr := serveLiveness(t, streamingHandler(ended), l)
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		client := &http.Client{Transport: &http.Transport{Protocols: p}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/stream", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// Read for well over the ping bounds: the client's transport
		// answers pings, so the stream stays.
		var got atomic.Int64
		go func() {
			n, _ := io.Copy(io.Discard, resp.Body)
			got.Store(n)
		}()
		select {
		case <-ended:
			t.Fatal("the stream of a client that answers pings ended")
		case <-time.After(1500 * time.Millisecond):
		}
		cancel()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end when its client closed it")
		}
	})
}

// Every accepted TCP connection gets the ack timeout (TCP_USER_TIMEOUT).
func TestConnectionsGetAckTimeout(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_USER_TIMEOUT is Linux's")
	}
	got := make(chan int, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(h, nil, liveness{time.Second, time.Second, 1234 * time.Millisecond})
	set := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		set(c, s)
		if s != http.StateNew {
			return
		}
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			got <- -1
			return
		}
		_ = raw.Control(func(fd uintptr) {
			v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
			if err != nil {
				v = -1
			}
			got <- v
		})
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := <-got; v != 1234 {
		t.Fatalf("TCP_USER_TIMEOUT of an accepted connection = %d ms, want 1234", v)
	}
}
