package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// MinBodyRate is the slowest a request body may arrive, in bytes per second,
// once its BodyReadTimeout has passed: every byte received moves the body's
// deadline 1/MinBodyRate s later, so a large upload at a sensible speed is
// never cut, while a body trickled a byte at a time is cut at BodyReadTimeout.
const MinBodyRate = 64 << 10

// DefaultBodyReadTimeout is the BodyReadTimeout of DefaultLimits, and of the
// backend's and sim nodes' listeners unless `--body-timeout` says otherwise.
const DefaultBodyReadTimeout = 10 * time.Second

// GuardBodies protects the handlers of h from request bodies that are slow or
// malformed. It is the outermost layer of every Ludus listener (gateway,
// backend, sim node):
//
//   - Read deadline. Unless the procedure is client- or bidirectionally
//     streaming (looked up in the registered proto descriptors: GameService.Play,
//     NodeService.Inputs, reflection), the body must arrive within timeout
//     plus 1/MinBodyRate s per byte received; otherwise the read fails, the call
//     ends with DeadlineExceeded and the handler is released. The deadline is
//     lifted once the body has been read to its end, so a handler may then take
//     as long as it needs (and a server stream, whose request is one message,
//     streams as long as it likes). Headers have ReadHeaderTimeout; streaming
//     procedures keep their own idle limits. timeout <= 0: no deadline.
//   - Framing. A Connect-streaming, gRPC or gRPC-Web body whose envelope is
//     truncated (the body ends inside a 5-byte prefix or before the length the
//     prefix announced), that sets the compressed flag without declaring an
//     encoding, or that sets flags a client may not send, fails with
//     InvalidArgument naming the fault. connect-go would report these as
//     Internal ("protocol error: promised N bytes in enveloped message"), and
//     it reads a unary request before any interceptor runs, so the check has
//     to sit under it, on the body.
//   - Read errors. A body that ends before its Content-Length, or is not valid
//     chunked encoding, fails with InvalidArgument (connect-go: Unknown); a
//     connection reset by the client, with Canceled.
//
// Errors are *connect.Error values returned by the body's Read, which
// connect-go passes on unchanged; the pass-through proxy writes them with
// connect.ErrorWriter.
func GuardBodies(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &guardedBody{body: r.Body, ctx: r.Context(), timeout: timeout}
		if timeout > 0 && !clientStreaming(r.URL.Path) {
			rc := http.NewResponseController(w)
			b.start = time.Now()
			b.deadline = b.start.Add(timeout)
			if rc.SetReadDeadline(b.deadline) == nil {
				b.rc = rc
			}
		}
		ctype := strings.ToLower(r.Header.Get("Content-Type"))
		switch {
		case strings.HasPrefix(ctype, "application/grpc-web-text"):
			// Not served by connect-go (415).
		case strings.HasPrefix(ctype, "application/grpc"): // and gRPC-Web
			b.framing, b.compressed = framingGRPC, declaresEncoding(r.Header.Get("Grpc-Encoding"))
		case strings.HasPrefix(ctype, "application/connect+"):
			b.framing, b.compressed = framingConnect, declaresEncoding(r.Header.Get("Connect-Content-Encoding"))
		}
		r.Body = b
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), guardedBodyKey{}, b)))
	})
}

type guardedBodyKey struct{}

// bodyFailure returns why the guarded request body of ctx's request failed,
// or nil. A Read in progress is waited for (up to wait): over HTTP/1.1 a
// failed read cancels the request's context before the Read returns, so a
// proxy may see the cancellation before the reason is recorded.
func bodyFailure(ctx context.Context, wait time.Duration) error {
	b, ok := ctx.Value(guardedBodyKey{}).(*guardedBody)
	if !ok {
		return nil
	}
	got := make(chan error, 1)
	go func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		got <- b.err
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(wait):
		return nil
	}
}

func declaresEncoding(enc string) bool { return enc != "" && enc != "identity" }

// clientStreaming reports whether path names a registered procedure whose
// client sends a stream of messages. Unknown paths are not.
func clientStreaming(path string) bool {
	svc, method, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok {
		return false
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return false
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	return md != nil && md.IsStreamingClient()
}

type framing int

const (
	framingNone    framing = iota
	framingGRPC            // gRPC and gRPC-Web requests: flags 0 or 1 (compressed)
	framingConnect         // Connect streaming: 0, 1, and 2 (end of stream) as the last envelope
)

// guardedBody is a request body under GuardBodies.
type guardedBody struct {
	body    io.ReadCloser
	ctx     context.Context
	timeout time.Duration

	// Read deadline; rc is nil without one.
	rc       *http.ResponseController
	start    time.Time
	deadline time.Time
	read     int64

	// Envelope framing.
	framing    framing
	compressed bool // the request declares a compression: flag 1 is allowed
	prefix     [5]byte
	prefixN    int   // bytes of the current prefix seen
	remaining  int64 // payload bytes of the current envelope still to come
	ended      bool  // an end-of-stream envelope was seen: nothing may follow

	// mu is held during Read, so bodyFailure sees the outcome of a Read in
	// progress; err is sticky.
	mu  sync.Mutex
	err error
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	if n > 0 {
		b.read += int64(n)
		b.extend()
		if b.framing != framingNone {
			if ferr := b.scan(p[:n]); ferr != nil {
				b.fail(ferr)
				return 0, ferr
			}
		}
	}
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		if b.framing != framingNone && (b.prefixN > 0 || b.remaining > 0) {
			ferr := b.truncated()
			b.fail(ferr)
			return 0, ferr
		}
		b.lift()
		return n, err
	default:
		if m := b.mapError(err); m != nil {
			b.fail(m)
			return 0, m
		}
		return n, err
	}
}

func (b *guardedBody) Close() error {
	return b.body.Close()
}

// fail makes err the answer of every later Read. The deadline stays: the
// server may still read (to discard) the rest of the body before answering,
// and must not wait on a trickle to do so.
func (b *guardedBody) fail(err error) {
	b.err = err
}

// extend moves the deadline later by the time the bytes read so far may take
// at MinBodyRate, in steps of at least half a second.
func (b *guardedBody) extend() {
	if b.rc == nil {
		return
	}
	want := b.start.Add(b.timeout + time.Duration(float64(b.read)/MinBodyRate*float64(time.Second)))
	if want.Sub(b.deadline) >= 500*time.Millisecond {
		b.deadline = want
		_ = b.rc.SetReadDeadline(want)
	}
}

// lift removes the deadline once the body is read: the handler may take as
// long as it needs to answer.
func (b *guardedBody) lift() {
	if b.rc != nil {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.rc = nil
	}
}

// scan follows the envelopes in p.
func (b *guardedBody) scan(p []byte) error {
	for len(p) > 0 {
		if b.remaining > 0 {
			k := min(int64(len(p)), b.remaining)
			b.remaining -= k
			p = p[k:]
			continue
		}
		if b.ended {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("malformed request: data after the end-of-stream envelope"))
		}
		k := copy(b.prefix[b.prefixN:], p)
		b.prefixN += k
		p = p[k:]
		if b.prefixN < len(b.prefix) {
			return nil
		}
		b.prefixN = 0
		flags := b.prefix[0]
		b.remaining = int64(b.prefix[1])<<24 | int64(b.prefix[2])<<16 | int64(b.prefix[3])<<8 | int64(b.prefix[4])
		if flags&1 != 0 && !b.compressed {
			return connect.NewError(connect.CodeInvalidArgument, errors.New("malformed request: an envelope has the compressed flag but the request declares no encoding"))
		}
		switch b.framing {
		case framingGRPC:
			if flags&^1 != 0 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("malformed request: envelope flags 0x%02x (a request message has 0 or 1)", flags))
			}
		case framingConnect:
			if flags&^3 != 0 {
				return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("malformed request: envelope flags 0x%02x (a request message has 0 or 1)", flags))
			}
			b.ended = flags&2 != 0
		}
	}
	return nil
}

func (b *guardedBody) truncated() error {
	if b.prefixN > 0 {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("malformed request: the body ended inside an envelope prefix (%d of 5 bytes)", b.prefixN))
	}
	return connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("malformed request: the body ended %d bytes short of the envelope's announced length", b.remaining))
}

// mapError turns a failed body read into the code it deserves, or returns nil
// to leave err to connect-go (a request whose context ended, which it reports
// as Canceled or DeadlineExceeded; a body over an http.MaxBytesReader limit,
// ResourceExhausted).
func (b *guardedBody) mapError(err error) error {
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		// Checked first: over HTTP/1.1 the failed read has already canceled
		// the request's context.
		return connect.NewError(connect.CodeDeadlineExceeded,
			fmt.Errorf("request body too slow: it must arrive within %v, and at %d KiB/s or faster after that", b.timeout, MinBodyRate>>10))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// Checked before the context too: over HTTP/1.1 the client may have
		// closed only its sending side, and still read the answer.
		return connect.NewError(connect.CodeInvalidArgument, errors.New("malformed request: the body ended before its declared Content-Length"))
	}
	if b.ctx.Err() != nil {
		return nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return nil
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) {
		return connect.NewError(connect.CodeCanceled, fmt.Errorf("client went away: %w", err))
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("malformed request body: %w", err))
}
