package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"ludus.dev/ludus/gen/ludus/v1/ludusv1connect"
)

// passThroughPrefixes are the paths the gateway passes to the backend.
var passThroughPrefixes = []string{
	"/" + ludusv1connect.AuthServiceName + "/",
	"/" + ludusv1connect.AdminServiceName + "/",
	"/" + ludusv1connect.FleetServiceName + "/",
	"/" + ludusv1connect.ProgressionServiceName + "/",
	"/" + ludusv1connect.MatchmakingAdminServiceName + "/",
	"/" + ludusv1connect.QuotaServiceName + "/",
	"/" + ludusv1connect.BatchServiceName + "/",
	"/" + ludusv1connect.GameLogServiceName + "/",
	"/batch/archives/",
	"/.well-known/",
}

// passThroughLimit is the largest request body the gateway passes to the
// backend on path: MaxUploadBytes for AdminService.UploadModule (a module),
// MaxAuthMessageBytes for AuthService (callers are anonymous), and
// MaxAdminMessageBytes for everything else.
func (l Limits) passThroughLimit(path string) int64 {
	switch {
	case path == ludusv1connect.AdminServiceUploadModuleProcedure:
		return int64(l.MaxUploadBytes)
	case strings.HasPrefix(path, "/"+ludusv1connect.AuthServiceName+"/"):
		return int64(l.MaxAuthMessageBytes)
	default:
		return int64(l.MaxAdminMessageBytes)
	}
}

// rpcErrors writes errors in the protocol of the request (Connect, gRPC or
// gRPC-Web), so a client reads the code and message as from any RPC.
var rpcErrors = connect.NewErrorWriter()

// writeError answers r with err: in its RPC protocol, or for anything else
// as plain text with status.
func writeError(w http.ResponseWriter, r *http.Request, err error, status int) {
	if rpcErrors.IsSupported(r) {
		_ = rpcErrors.Write(w, r, err)
		return
	}
	http.Error(w, err.Error(), status)
}

// passThrough returns the reverse proxy to the backend, with a body limit per
// procedure (passThroughLimit). A body announced larger than the limit is
// refused before the backend is contacted; one that turns out larger while it
// streams is cut there. Either way the client gets ResourceExhausted in its
// protocol (Connect: HTTP 429; other requests: 413).
func (g *Gateway) passThrough() http.Handler {
	backend, _ := url.Parse(g.cfg.BackendURL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.SetXForwarded()
		},
		Transport:     H2CTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The transport may report a failed body read as such, or (over
			// HTTP/1.1, where the failed read cancels the request) as a
			// canceled context: the body itself says what happened.
			if rb, ok := r.Context().Value(recordingBodyKey{}).(*recordingBody); ok && rb.failure() != nil {
				err = rb.failure()
			} else if berr := bodyFailure(r.Context(), time.Second); berr != nil {
				err = berr
			}
			var mbe *http.MaxBytesError
			var ce *connect.Error
			switch {
			case errors.As(err, &mbe):
				writeError(w, r, tooLarge(r.URL.Path, mbe.Limit), http.StatusRequestEntityTooLarge)
			case errors.As(err, &ce):
				// From GuardBodies: a slow, truncated or garbled body.
				writeError(w, r, ce, http.StatusBadRequest)
			case r.Context().Err() != nil:
				// The client went away; nobody reads an answer.
			default:
				g.log.Warn("backend unreachable", "path", r.URL.Path, "err", err)
				http.Error(w, "backend unavailable", http.StatusBadGateway)
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := g.limits.passThroughLimit(r.URL.Path)
		if r.ContentLength > limit {
			writeError(w, r, tooLarge(r.URL.Path, limit), http.StatusRequestEntityTooLarge)
			return
		}
		rb := &recordingBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit)}
		r = r.WithContext(context.WithValue(r.Context(), recordingBodyKey{}, rb))
		r.Body = rb
		proxy.ServeHTTP(w, r)
	})
}

type recordingBodyKey struct{}

// recordingBody remembers why reading a request body failed.
type recordingBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *recordingBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func tooLarge(path string, limit int64) error {
	return connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("request body too large: %s takes at most %d bytes", path, limit))
}
